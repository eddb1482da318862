"""`workplace_assistant`: NeMo Gym's multi-step office environment, 27 tools over six tables.

The model works in a simulated company (today is Thursday 2023-11-30, 23:59) with tools
for email, calendar, website analytics, project management, a customer relationship
manager and the company directory, named, argued and answering exactly as NeMo Gym's
(`email_reply_email`, `calendar_create_event`, `company_directory_find_email_address`,
...). A tool answers `{"output": <result>}`; a tool that fails answers
`{"output": "Error executing tool '<name>': <reason>"}`, so the model can correct itself.
The initial tables are NeMo Gym's (`data/`, Apache-2.0, NVIDIA).

Session state: seeding gives the session a fresh toolkit. The session's KV entry holds
only the log of calls that changed something; each tool call rebuilds the toolkit by
replaying that log on the shared initial tables, so any replica serves any call and a
session costs a few hundred bytes. A call for a session never seeded (or expired) is
answered `Session not initialized. Please call seed_session first.`

Reward (NeMo Gym's `is_correct`): replay the response's `function_call`s on one fresh
toolkit and the row's `ground_truth` calls (`[{"name", "arguments"}]`, arguments as JSON
text) on another; reward 1.0 iff the calendar, emails, plots, project tasks and
customers tables end up equal (lower-cased except `status`, `list_name` and `board`), else
0.0. It rewards the final state, not the calls: a different route to the same state
scores 1.0, and failing calls are skipped as NeMo Gym skips them.

Known differences from NeMo Gym:
- an unknown tool name is answered by the agent, as a NeMo Gym server without that route
  answers it (`{"detail":"Not Found"}`), not by the environment (NeMo Gym's catch-all route
  answers `{"output": "Error executing tool '<name>': '<name>'"}`), since every tool is its
  own subject on the bus;
- arguments given as JSON arrays or objects where the schema says string may fail with
  differently worded errors than pandas raises (JSON strings, numbers, booleans and
  `null` behave as in NeMo Gym);
- emails that tie on time in a search (those sent in the session share one timestamp)
  keep table order; NeMo Gym's does too for up to 16 matches, beyond which its numpy sort
  is unstable and their order depends on the CPU;
- a state whose compared column holds no text at all (only reachable by deleting every
  row and writing numbers) is compared, where NeMo Gym's verifier raises.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from gymbus.schemas import NotFound, VerifyRequest, VerifyResult

from ..._spec import Environment, Session, Tool
from ._calls import TOOL_NAMES, call, rebuild, replay, without_nulls
from ._state import same_state

__all__ = ["ENVIRONMENT"]

NOT_SEEDED = "Session not initialized. Please call seed_session first."


class LoggedCall(Struct, array_like=True):
    """A call that changed the session's tables, with the arguments the tool received."""

    name: str
    arguments: dict[str, Any]


class WorkplaceState(Struct, kw_only=True):
    """A session's state: its changing calls, in order (empty right after seeding)."""

    calls: list[LoggedCall] = []


class ToolOutput(Struct):
    """What every tool answers, as NeMo Gym's route does."""

    output: Any


class WorkplaceVerifyRequest(VerifyRequest, kw_only=True):
    """The row's expected calls: `[{"name": ..., "arguments": "<JSON text>"}, ...]`."""

    ground_truth: list[Any]


async def seed(request: Any, session: Session) -> None:
    """A fresh toolkit for the session (the row is not read)."""
    await session.save(WorkplaceState())


async def _call_tool(name: str, args: dict[str, Any], session: Session) -> ToolOutput:
    state = await session.load(WorkplaceState)
    if state is None:
        raise NotFound(NOT_SEEDED)
    kit = rebuild((logged.name, logged.arguments) for logged in state.calls)
    output = call(kit, name, args)
    if kit.changed:
        state.calls.append(LoggedCall(name, without_nulls(args)))
        await session.save(state)
    return ToolOutput(output)


def _tool(name: str) -> Tool:
    async def workplace_tool(args: dict[str, Any], session: Session) -> ToolOutput:
        return await _call_tool(name, args, session)

    return Tool(name=name, fn=workplace_tool, args_type=dict)


def _expected_calls(ground_truth: list[Any]) -> list[tuple[Any, Any]]:
    # NeMo Gym reads `call["name"]` and `call["arguments"]`; an entry without them is skipped.
    return [(call.get("name"), call.get("arguments")) for call in ground_truth if isinstance(call, dict)]


async def verify(request: WorkplaceVerifyRequest, session: Session) -> VerifyResult:
    """1.0 iff the predicted calls leave the same tables as the ground-truth calls."""
    predicted = [
        (item.name, item.arguments) for item in request.response.output if item.kind == "function_call"
    ]
    same = same_state(replay(predicted), replay(_expected_calls(request.ground_truth)))
    return VerifyResult(reward=1.0 if same else 0.0)


ENVIRONMENT = Environment(
    name="workplace_assistant",
    tools=tuple(_tool(name) for name in TOOL_NAMES),
    seed=seed,
    verify=verify,
    verify_request=WorkplaceVerifyRequest,
    agents=("workplace_assistant_simple_agent",),
    max_steps=6,
    description="NeMo Gym's workplace assistant: 27 office tools; reward for reaching the expected tables.",
)
