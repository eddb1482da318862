"""Chat Completions in front of a GymBus model: a request as Responses parameters, and the
model's response as a chat completion.

NeMo Gym servers that call a judge with Chat Completions (`verifif`, `speed_bench`,
`physics_judge` with `use_chat_completions_for_judge`, any `NeMoGymAsyncOpenAI` caller)
reach the bridge's model shims this way. Request: `system` and `developer` messages keep
their role, an assistant message's `tool_calls` become `function_call` items, `tool`
messages `function_call_output` items, nested function tools flat ones,
`max_completion_tokens` (or `max_tokens`) `max_output_tokens`. Response: the text of its
messages becomes the message's content, `function_call` items its `tool_calls` (finish
reason `tool_calls`), reasoning `reasoning_content`; an incomplete response finishes with
`length`.
"""

from __future__ import annotations

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

__all__ = ["chat_completion", "params_from_chat"]

_PARAMS = ("temperature", "top_p", "parallel_tool_calls", "user", "store")


def params_from_chat(chat: dict[str, Any]) -> ResponsesCreateParams:
    """The Responses parameters of a Chat Completions request; `BadRequest` if it has no messages."""
    messages = chat.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("a chat completion request needs `messages`")
    params = ResponsesCreateParams(input=[item for message in messages for item in _items(message)])
    for key in _PARAMS:
        if chat.get(key) is not None:
            setattr(params, key, chat[key])
    limit = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if isinstance(limit, int):
        params.max_output_tokens = limit
    if chat.get("tools"):
        params.tools = [_tool(tool) for tool in chat["tools"]]
    choice = chat.get("tool_choice")
    if isinstance(choice, str):
        params.tool_choice = choice
    if isinstance(chat.get("reasoning_effort"), str):
        params.reasoning = Reasoning(effort=chat["reasoning_effort"])
    return params


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

