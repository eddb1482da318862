"""Responses API ↔ Chat Completions, for OpenAI-compatible servers without `/responses`
(vLLM, SGLang and most inference providers).

Request: `instructions` becomes a leading system message, `developer` messages become
`system`, `function_call` items become an assistant message's `tool_calls`,
`function_call_output` items become `tool` messages, flat function tools are nested
under `function` (`strict` is dropped, as NeMo Gym does), `max_output_tokens` becomes
`max_tokens`, `reasoning.effort` `reasoning_effort`, `text.format` `response_format` (a JSON
schema nested under `json_schema`) and `text.verbosity` `verbosity`, as NeMo Gym's own
converter does; `temperature`, `top_p`, `tool_choice`, `parallel_tool_calls` and `user`
keep their name; GymBus's `prompt_cache_key` (a routing hint the vLLM adapter reads) is
not sent. Reasoning items are dropped (`reasoning="drop"`: hosted APIs take no reasoning
input) or, for open models (`reasoning="think"`), written back as
`<think>...</think>` before the content of the assistant message that follows them, the
way such models wrote it (their chat templates decide what to keep). A JSON-string
`metadata.extra_body` is merged into the request, as NeMo Gym's vLLM adapter does: it
carries the Chat Completions fields Responses has no name for (`seed`, `stop`, ...).

Response: `reasoning_content` (or `reasoning`, or a leading `<think>...</think>`)
becomes a reasoning item, text content an assistant message, `tool_calls`
`function_call` items; `finish_reason == "length"` marks the response incomplete.
The token fields vLLM adds (`prompt_token_ids`, `choices[].token_ids`, logprobs) are
decoded too, for token capture (`_tokens`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

from gymbus.schemas import (
    BadRequest,
    ContentPart,
    IncompleteDetails,
    Item,
    Reasoning,
    Response,
    ResponsesCreateParams,
    SummaryPart,
    Usage,
    input_items,
    item_text,
)

__all__ = [
    "ChatCompletion",
    "ChatUsage",
    "Choice",
    "TokenLogprob",
    "EXTRA_BODY",
    "chat_messages",
    "chat_request",
    "chat_tools",
    "context_overflow",
    "reasoning_text",
    "response_from_chat",
    "response_from_parts",
]

EXTRA_BODY = "extra_body"
"""The `metadata` key whose JSON object is merged into a Chat Completions request."""
_SAME_NAME = ("temperature", "top_p", "tool_choice", "parallel_tool_calls", "user")
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


class _Function(Struct):
    name: str
    arguments: str


class _ToolCall(Struct):
    id: str
    function: _Function
    type: str = "function"


class _Message(Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class TokenLogprob(Struct):
    """One generated token's logprob entry; with `return_tokens_as_token_ids`, `token` is
    `"token_id:<id>"`."""

    token: str
    logprob: float


class _ChoiceLogprobs(Struct):
    content: list[TokenLogprob] | None = None


class Choice(Struct):
    message: _Message
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: _ChoiceLogprobs | None = None


class ChatUsage(Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(Struct):
    """The fields of a Chat Completions response that GymBus reads (vLLM's token fields too)."""

    id: str
    choices: list[Choice]
    model: str = ""
    created: float = 0.0
    usage: ChatUsage | UnsetType | None = UNSET
    prompt_token_ids: list[int] | None = None


def chat_request(
    params: ResponsesCreateParams, model: str, reasoning: Literal["drop", "think"] = "drop"
) -> dict[str, Any]:
    """Keyword arguments for `chat.completions.create` equivalent to `params`."""
    request: dict[str, Any] = {"model": model, "messages": chat_messages(params, reasoning)}
    tools = chat_tools(params)
    if tools:
        request["tools"] = tools
    if params.max_output_tokens is not UNSET and params.max_output_tokens is not None:
        request["max_tokens"] = params.max_output_tokens
    for name in _SAME_NAME:
        value = getattr(params, name)
        if value is not UNSET and value is not None:
            request[name] = value
    if isinstance(request.get("tool_choice"), dict) and "name" in request["tool_choice"]:
        request["tool_choice"] = {"type": "function", "function": {"name": request["tool_choice"]["name"]}}
    if isinstance(params.reasoning, Reasoning) and isinstance(params.reasoning.effort, str):
        request["reasoning_effort"] = params.reasoning.effort
    request |= _text_options(params)
    extra = _extra_body(params)
    if extra:
        request["extra_body"] = extra
    return request


def _text_options(params: ResponsesCreateParams) -> dict[str, Any]:
    """`response_format` and `verbosity` for the request's `text`, as NeMo Gym converts them."""
    text = params.text if isinstance(params.text, dict) else {}
    options: dict[str, Any] = {}
    form = text.get("format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        kept = ("name", "schema", "strict", "description")
        schema = {key: form[key] for key in kept if form.get(key) is not None}
        options["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(form, dict) and form.get("type") == "json_object":
        options["response_format"] = {"type": "json_object"}
    elif isinstance(form, dict) and form.get("type") not in (None, "text"):
        raise BadRequest(f"the request's text.format type {form.get('type')!r} has no Chat Completions form")
    if text.get("verbosity") is not None:
        options["verbosity"] = text["verbosity"]
    return options


def _extra_body(params: ResponsesCreateParams) -> dict[str, Any]:
    metadata = params.metadata if isinstance(params.metadata, dict) else {}
    try:
        extra = json.loads(metadata.get(EXTRA_BODY, "{}"))
    except ValueError:
        return {}
    return extra if isinstance(extra, dict) else {}


def chat_tools(params: ResponsesCreateParams) -> list[dict[str, Any]]:
    """The request's function tools in the Chat Completions form."""
    if not isinstance(params.tools, list):
        return []
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in params.tools
        if tool.type == "function"
    ]


def chat_messages(
    params: ResponsesCreateParams, reasoning: Literal["drop", "think"] = "drop"
) -> list[dict[str, Any]]:
    """The request's instructions and input items as chat messages."""
    messages: list[dict[str, Any]] = []
    if isinstance(params.instructions, str) and params.instructions:
        messages.append({"role": "system", "content": params.instructions})
    thought: list[str] = []  # reasoning waiting for the assistant message it belongs to
    for item in input_items(params):
        if item.kind == "reasoning":
            if reasoning == "think":
                thought.append(reasoning_text(item))
            continue
        _append(messages, item)
        if thought and messages[-1]["role"] == "assistant":
            _prepend_thought(messages[-1], "\n\n".join(thought))
            thought = []
    if thought:
        messages.append({"role": "assistant", "content": None})
        _prepend_thought(messages[-1], "\n\n".join(thought))
    return messages


def reasoning_text(item: Item) -> str:
    """The text of a reasoning item: its summary paragraphs joined by blank lines."""
    summary = item.summary if isinstance(item.summary, list) else []
    return "\n\n".join(part.text for part in summary)


def _prepend_thought(message: dict[str, Any], thought: str) -> None:
    message["content"] = f"<think>{thought}</think>" + (message["content"] or "")


def _append(messages: list[dict[str, Any]], item: Item) -> None:
    if item.kind == "message":
        role = "system" if item.role == "developer" else str(item.role or "user")
        messages.append({"role": role, "content": item_text(item)})
    elif item.kind == "function_call":
        call = {
            "id": item.call_id,
            "type": "function",
            "function": {"name": item.name, "arguments": item.arguments},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        elif last is not None and last["role"] == "assistant":
            last["tool_calls"] = [call]
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif item.kind == "function_call_output":
        output = item.output if isinstance(item.output, str) else item_text(Item(content=item.output))
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})


def response_from_chat(chat: ChatCompletion) -> Response:
    """The Responses API form of a chat completion (first choice)."""
    choice = chat.choices[0]
    message = choice.message
    usage = chat.usage if isinstance(chat.usage, ChatUsage) else ChatUsage()
    return response_from_parts(
        chat.id,
        message.content or "",
        message.reasoning_content or message.reasoning,
        [(call.id, call.function.name, call.function.arguments) for call in message.tool_calls or []],
        choice.finish_reason,
        usage,
        chat.model,
        chat.created,
    )


def response_from_parts(
    reply_id: str,
    content: str,
    reasoning: str | None,
    calls: list[tuple[str, str, str]],
    finish_reason: str | None,
    usage: ChatUsage,
    model: str,
    created: float,
) -> Response:
    """A response from what a model generated: text (a leading `<think>...</think>` is
    reasoning unless `reasoning` is given), and tool calls as (call id, name, arguments)."""
    output: list[Item] = []
    think = _THINK.match(content)
    if think and not reasoning:
        reasoning, content = think.group(1).strip(), content[think.end() :]
    if reasoning:
        output.append(Item(type="reasoning", id=f"rs_{reply_id}", summary=[SummaryPart(text=reasoning)]))
    if content or not calls:
        output.append(
            Item(
                type="message",
                id=f"msg_{reply_id}",
                role="assistant",
                status="completed",
                content=[ContentPart(type="output_text", text=content, annotations=[], logprobs=None)],
            )
        )
    for call_id, name, arguments in calls:
        output.append(
            Item(
                type="function_call",
                id=f"fc_{call_id}",
                status="completed",
                name=name,
                arguments=arguments,
                call_id=call_id,
            )
        )
    truncated = finish_reason == "length"
    return Response(
        id=f"resp_{reply_id}",
        created_at=created,
        model=model,
        output=output,
        status="incomplete" if truncated else "completed",
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if truncated else None,
        usage=Usage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        ),
    )


def context_overflow(model: str) -> Response:
    """What a request whose prompt no longer fits the model's context becomes: an empty,
    incomplete response (as NeMo Gym's vLLM adapter answers), so the rollout ends and is
    verified on what it has instead of failing."""
    return Response(
        id="resp_context_overflow",
        created_at=0.0,
        model=model,
        output=[],
        status="incomplete",
        incomplete_details=IncompleteDetails(reason="max_output_tokens"),
    )
