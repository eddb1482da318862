"""`single_call_agent`: one model call, no tool execution, then verify.

For tasks where a `function_call` *is* the answer (structured outputs through a tool),
as NeMo Gym's `simple_agent` with `execute_tool_calls: false`: seed → one model call →
verify the response as generated. `max_steps` does not apply.
"""

from __future__ import annotations

import msgspec

from gymbus.schemas import RESPONSE, BadRequest, ResponsesCreateParams, TaskRow, merge_row

from .._spec import Calls
from ._failures import failing_as

__all__ = ["single_call_agent"]


async def single_call_agent(row: bytes, calls: Calls, max_steps: int) -> bytes:
    """One rollout of `row`: the row plus `response`, `reward` and the verifier's fields."""
    async with failing_as("invalid_input"):
        params = _task_params(row)
    async with failing_as("seed_failed"):
        await calls.seed(row)
    async with failing_as("model_failed"):
        response = await calls.model(params)
    async with failing_as("verify_failed"):
        verdict = await calls.verify(row, response)
    return merge_row(row, verdict, **{RESPONSE: response})


_row_decoder = msgspec.json.Decoder(TaskRow)


def _task_params(row: bytes) -> ResponsesCreateParams:
    try:
        return _row_decoder.decode(row).responses_create_params
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid task row: {exc}") from None
