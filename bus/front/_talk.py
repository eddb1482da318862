"""One conversation with an agent, as NeMo Gym's `/v1/responses` on an agent has one:
the agent's loop (seed, model, tools) on the bus, without a verdict.

No dataset row, so nothing to verify against: the rollout's verify call answers with no
verdict, and what comes back is the agent's response, every turn in its output.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec

from gymbus.functions import Agent
from gymbus.schemas import (
    RESPONSE,
    GymError,
    Response,
    ResponsesCreateParams,
    RolloutFailed,
    TaskRow,
    Timeouts,
    row_fields,
)

from ..connection import Bus
from ..hosting import BusCalls
from ..wire import decode, encode

__all__ = ["talk"]


class _Unverified(BusCalls):
    async def verify(self, row: bytes, response: Response | msgspec.Raw) -> bytes:
        return b"{}"


async def talk(bus: Bus, agent: Agent, params: ResponsesCreateParams, timeouts: Timeouts) -> Response:
    """`agent`'s response to `params`, its loop run from this process over the bus within
    `timeouts.agent_run`. `RolloutFailed` when the loop cannot finish (a model nobody serves,
    a tool call lost); `TimeoutError` past the deadline."""
    deadline = time.time() + timeouts.agent_run
    calls = _Unverified(bus.conn, agent, session=uuid.uuid4().hex, deadline=deadline, timeouts=timeouts)
    row = encode(TaskRow(responses_create_params=params))
    async with asyncio.timeout(timeouts.agent_run):
        try:
            result = await agent.rollout(row, calls, agent.max_steps)
        except GymError:
            raise
        except Exception as exc:  # a tool call lost on the bus, an agent bug: no restart for a chat
            raise RolloutFailed("agent_failed", f"{agent.name}: {type(exc).__name__}: {exc}") from None
    fields = row_fields(result)
    if RESPONSE not in fields:
        raise RolloutFailed("agent_failed", f"{agent.name} answered without a response")
    return decode(bytes(fields[RESPONSE]), Response, "agent response")
