"""Chat Completions in front of a GymBus model: a request as Responses parameters, and the
model's response as a chat completion.

NeMo Gym servers that call a judge with Chat Completions (`bbq`, `verifif`, `speed_bench`,
`physics_judge` with `use_chat_completions_for_judge`, any `NeMoGymAsyncOpenAI` caller)
reach the bridge's model shims this way. Every field of NeMo Gym's own Chat Completions
request model is carried, so the endpoint gets what the judge asked for:

- messages: `system` and `developer` keep their role, an assistant message's `tool_calls`
  become `function_call` items, `tool` messages `function_call_output` items;
- fields the Responses API has too keep their name (`temperature`, `top_p`, `user`, ...);
  `max_completion_tokens` (or `max_tokens`) becomes `max_output_tokens`, `reasoning_effort`
  `reasoning.effort`, `response_format` `text.format` (a JSON schema flat, as Responses
  has it), `verbosity` `text.verbosity`, nested function tools and tool choices flat ones;
- the rest (`seed`, `stop`, `frequency_penalty`, `logit_bias`, ...) has no Responses field:
  it rides in `metadata.extra_body`, a JSON object the chat adapters merge into the request
  they send (NeMo Gym's vLLM adapter reads the same key).

A field no Chat Completions endpoint reached through GymBus can honour (`n` above 1: one
choice comes back; `stream`; `audio`) or that NeMo Gym does not accept is refused with
`BadRequest` naming it, never dropped.

Response: the text of its messages becomes the message's content, `function_call` items its
`tool_calls` (finish reason `tool_calls`), reasoning `reasoning_content`; an incomplete
response finishes with `length`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gymbus.schemas import (
    BadRequest,
    Item,
    Reasoning,
    Response,
    ResponsesCreateParams,
    Tool,
    item_text,
)

from ..models._chat import EXTRA_BODY

__all__ = ["chat_completion", "params_from_chat"]

_SAME = (
    "temperature", "top_p", "parallel_tool_calls", "user", "store", "top_logprobs", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "moderation",
)  # fmt: skip
"""Chat Completions fields the Responses API has under the same name and meaning."""
_EXTRA_BODY = (
    "seed", "stop", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "prediction",
    "modalities", "web_search_options", "chat_template_kwargs", "thinking", "output_config",
)  # fmt: skip
"""Chat Completions fields (NeMo Gym's own request model's) that Responses lacks."""
_MAPPED = (
    "messages", "model", "max_completion_tokens", "max_tokens", "reasoning_effort", "response_format",
    "verbosity", "tools", "tool_choice", "metadata", "n", "stream", "stream_options",
)  # fmt: skip


def params_from_chat(chat: dict[str, Any]) -> ResponsesCreateParams:
    """The Responses parameters of a Chat Completions request; `BadRequest` naming a field
    that cannot be carried (or a request without messages)."""
    messages = chat.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("a chat completion request needs `messages`")
    _refuse_uncarried(chat)
    params = ResponsesCreateParams(input=[item for message in messages for item in _items(message)])
    for key in _SAME:
        if chat.get(key) is not None:
            setattr(params, key, chat[key])
    limit = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if isinstance(limit, int):
        params.max_output_tokens = limit
    if chat.get("tools"):
        params.tools = [_tool(tool) for tool in chat["tools"]]
    if chat.get("tool_choice") is not None:
        params.tool_choice = _tool_choice(chat["tool_choice"])
    if isinstance(chat.get("reasoning_effort"), str):
        params.reasoning = Reasoning(effort=chat["reasoning_effort"])
    text = _text_options(chat)
    if text:
        params.text = text
    metadata = {str(key): str(value) for key, value in (chat.get("metadata") or {}).items()}
    extra = {key: chat[key] for key in _EXTRA_BODY if chat.get(key) is not None}
    if extra:
        carried = json.loads(metadata.get(EXTRA_BODY) or "{}")
        metadata[EXTRA_BODY] = json.dumps(carried | extra)
    if metadata:
        params.metadata = metadata
    return params


def _refuse_uncarried(chat: dict[str, Any]) -> None:
    unknown = sorted(set(chat) - {*_SAME, *_EXTRA_BODY, *_MAPPED, "audio"})
    if unknown:
        named = ", ".join(map(repr, unknown))
        raise BadRequest(f"chat completion request field(s) {named}: not in NeMo Gym's Chat Completions")
    if chat.get("n") not in (None, 1):
        raise BadRequest(f"chat completion request asks for n={chat['n']!r} choices; the shim returns one")
    if chat.get("stream"):
        raise BadRequest("chat completion request asks to stream; the model shim answers whole completions")
    if chat.get("audio") is not None:
        raise BadRequest("chat completion request asks for audio output, which GymBus models do not make")


def _text_options(chat: dict[str, Any]) -> dict[str, Any]:
    """Responses' `text` for a Chat Completions `response_format` and `verbosity`: the
    inverse of NeMo Gym's own Responses-to-Chat conversion."""
    text: dict[str, Any] = {}
    form = chat.get("response_format")
    if isinstance(form, dict):
        kind = form.get("type")
        if kind == "json_schema":
            schema = form.get("json_schema") or {}
            text["format"] = {"type": "json_schema", **{k: v for k, v in schema.items() if v is not None}}
        elif kind in ("json_object", "text"):
            text["format"] = {"type": kind}
        else:
            raise BadRequest(f"chat completion request's response_format type {kind!r} has no Responses form")
    elif form is not None:
        raise BadRequest(f"chat completion request's response_format must be an object, not {form!r}")
    if chat.get("verbosity") is not None:
        text["verbosity"] = chat["verbosity"]
    return text


def _tool_choice(choice: Any) -> str | dict[str, Any]:
    """A nested `{"type": "function", "function": {"name": ...}}` choice, flat."""
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": str(choice["function"].get("name", ""))}
    if isinstance(choice, str | dict):
        return choice
    raise BadRequest(f"chat completion request's tool_choice must be a string or an object, not {choice!r}")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _items(message: dict[str, Any]) -> list[Item]:
    role = message.get("role", "user")
    if role == "tool":
        return [Item(type="function_call_output", call_id=str(message.get("tool_call_id", "")),
                     output=_text(message.get("content")))]  # fmt: skip
    items = []
    text = _text(message.get("content"))
    if text or role != "assistant":
        items.append(Item(type="message", role=role, content=text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(Item(
            type="function_call", call_id=str(call.get("id", "")), name=str(function.get("name", "")),
            arguments=str(function.get("arguments", "{}")),
        ))  # fmt: skip
    return items


def _tool(tool: dict[str, Any]) -> Tool:
    function = tool.get("function") or tool
    return Tool(
        type="function",
        name=str(function.get("name", "")),
        description=function.get("description"),
        parameters=function.get("parameters"),
    )


def chat_completion(response: Response) -> dict[str, Any]:
    """`response` as a Chat Completions reply with one choice."""
    text = "".join(item_text(item) for item in response.output if item.kind == "message")
    reasoning = "\n".join(_summary(item) for item in response.output if item.kind == "reasoning")
    calls = [
        {"id": item.call_id or item.id or "", "type": "function",
         "function": {"name": item.name or "", "arguments": item.arguments or "{}"}}
        for item in response.output
        if item.kind == "function_call"
    ]  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning
    finish = "tool_calls" if calls else ("length" if response.incomplete_details else "stop")
    usage = response.usage
    return {
        "id": response.id,
        "object": "chat.completion",
        "created": int(response.created_at or time.time()),
        "model": response.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.input_tokens if usage else 0,
            "completion_tokens": usage.output_tokens if usage else 0,
            "total_tokens": usage.total_tokens if usage else 0,
        },
    }


def _summary(item: Item) -> str:
    parts = item.summary if isinstance(item.summary, list) else []
    return "\n".join(part.text for part in parts) or (item_text(item) if item.content else "")
