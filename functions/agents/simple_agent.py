"""`simple_agent`: NeMo Gym's default agent loop.

seed the session with the whole row → loop: call the model with the prompt plus
everything generated so far; run each `function_call` in order and append its
`function_call_output` → stop at an assistant message without tool calls, at
`incomplete_details`, or after `max_steps` model calls → verify.

A tool that fails, or arguments that are not JSON, become a `function_call_output`
the model can read (`{"error": ...}`), as in NeMo Gym; a tool the environment does not
have, NeMo Gym's servers' answer to it (`UnknownTool.body`). The rollout's `response` holds
only the generated items, with `usage` summed over all model calls.
"""

from __future__ import annotations

import json

import msgspec

from gymbus.schemas import (
    RESPONSE,
    BadRequest,
    GymError,
    Item,
    Response,
    ResponsesCreateParams,
    TaskRow,
    UnknownTool,
    add_usage,
    input_items,
    merge_row,
)

from .._spec import Calls
from ._failures import failing_as

__all__ = ["respond", "simple_agent"]

_row_decoder = msgspec.json.Decoder(TaskRow)


async def simple_agent(row: bytes, calls: Calls, max_steps: int) -> bytes:
    """One rollout of `row`: the row plus `response`, `reward` and the verifier's fields."""
    async with failing_as("invalid_input"):
        params = _decode_row(row).responses_create_params
    async with failing_as("seed_failed"):
        await calls.seed(row)
    response = await respond(params, calls, max_steps)
    async with failing_as("verify_failed"):
        verdict = await calls.verify(row, response)
    return merge_row(row, verdict, **{RESPONSE: response})


def _decode_row(row: bytes) -> TaskRow:
    try:
        return _row_decoder.decode(row)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid task row: {exc}") from None


async def respond(params: ResponsesCreateParams, calls: Calls, max_steps: int) -> Response:
    """The model ↔ tools loop: the last model response, with every generated item as output."""
    prompt = input_items(params)
    generated: list[Item] = []
    usage = None
    last: Response | None = None
    for _ in range(max_steps):
        async with failing_as("model_failed"):
            last = await calls.model(msgspec.structs.replace(params, input=prompt + generated))
        generated.extend(last.output)
        usage = add_usage(usage, last.usage)
        if _finished(last):
            break
        for call in last.output:
            if call.kind == "function_call":
                generated.append(await _run_tool(call, calls))
    assert last is not None, "max_steps must be at least 1"
    return msgspec.structs.replace(last, output=generated, usage=usage)


def _finished(response: Response) -> bool:
    if response.incomplete_details is not None:
        return True
    kinds = {item.kind for item in response.output}
    return "function_call" not in kinds and "message" in kinds


async def _run_tool(call: Item, calls: Calls) -> Item:
    name, arguments = str(call.name or ""), str(call.arguments or "")
    try:
        json.loads(arguments)
    except ValueError as exc:
        output = _error(f"Invalid tool call arguments: {exc}")
    else:
        try:
            output = await calls.tool(name, arguments)
        except UnknownTool:
            output = UnknownTool.body.decode()
        except GymError as exc:
            output = _error(exc.message)
    return Item(type="function_call_output", call_id=call.call_id, output=output)


def _error(message: str) -> str:
    return json.dumps({"error": message})
