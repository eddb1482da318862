"""What the rollout viewer's list shows of one JSONL line: reward, agent, task and rollout
index, turns, tool calls and failure class.

A line is a row if it is a JSON object; anything else (broken JSON, a truncated last
line, an array) is skipped with a reason. A row whose fields have unexpected types (a
string reward, a list as `agent_ref`) is still a row: the fields that cannot be read
show as absent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import Struct, field

from gymbus.schemas import FAILURE_CLASS, ROLLOUT_INDEX, TASK_INDEX

__all__ = ["LineSummary", "NotARow", "summarize"]


class NotARow(ValueError):
    """The line is not a JSON object; the message says why."""


class LineSummary(Struct, kw_only=True, gc=False):
    """The list columns of one row. `turns` counts model turns: runs of reasoning,
    assistant messages and tool calls between tool outputs and user messages."""

    reward: float | None
    agent: str
    task: int | None
    rollout: int | None
    turns: int
    tool_calls: int
    failure: str


class _Item(Struct, gc=False):
    type: str | None = None
    role: str | None = None


class _Response(Struct, gc=False):
    output: list[_Item] = []


class _AgentRef(Struct, gc=False):
    name: str | None = None


class _Row(Struct, gc=False):
    """The fields the list reads; decoding skips every other field without building it."""

    reward: float | None = None
    agent_ref: _AgentRef | None = None
    task: int | None = field(default=None, name=TASK_INDEX)
    rollout: int | None = field(default=None, name=ROLLOUT_INDEX)
    failure: str | None = field(default=None, name=FAILURE_CLASS)
    response: _Response | None = None


_typed = msgspec.json.Decoder(_Row)
_generic = msgspec.json.Decoder()


def summarize(line: bytes) -> LineSummary:
    """The list columns of `line`; raises `NotARow` when it is not a JSON object."""
    try:
        row = _typed.decode(line)
    except msgspec.ValidationError:  # valid JSON, unexpected types: read what can be read
        return _summarize_loose(line)
    except msgspec.DecodeError as exc:
        raise NotARow(_reason(exc)) from None
    items = row.response.output if row.response else []
    return LineSummary(
        reward=row.reward,
        agent=(row.agent_ref.name or "") if row.agent_ref else "",
        task=row.task,
        rollout=row.rollout,
        turns=_turns([(item.type or "message", item.role) for item in items]),
        tool_calls=sum(1 for item in items if item.type == "function_call"),
        failure=row.failure or "",
    )


def _summarize_loose(line: bytes) -> LineSummary:
    row = _generic.decode(line)
    if not isinstance(row, dict):
        raise NotARow(f"a JSON {type(row).__name__}, not an object")
    response = row.get("response")
    output = response.get("output") if isinstance(response, dict) else None
    items = [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []
    kinds = [(_str(item.get("type")) or "message", _str(item.get("role"))) for item in items]
    agent_ref = row.get("agent_ref")
    return LineSummary(
        reward=_number(row.get("reward")),
        agent=_str(agent_ref.get("name")) if isinstance(agent_ref, dict) else "",
        task=_int(row.get(TASK_INDEX)),
        rollout=_int(row.get(ROLLOUT_INDEX)),
        turns=_turns(kinds),
        tool_calls=sum(1 for kind, _ in kinds if kind == "function_call"),
        failure=_str(row.get(FAILURE_CLASS)),
    )


_MODEL_KINDS = frozenset({"reasoning", "function_call"})


def _turns(kinds: Iterable[tuple[str, str | None]]) -> int:
    """Model turns among the generated items: a turn starts at a model item (reasoning, an
    assistant message, a tool call) that follows anything else, or starts the output."""
    turns, in_turn = 0, False
    for kind, role in kinds:
        by_model = kind in _MODEL_KINDS or (kind == "message" and role == "assistant")
        turns += by_model and not in_turn
        in_turn = by_model
    return turns


def _reason(exc: msgspec.DecodeError) -> str:
    message = str(exc)
    if "truncated" in message:
        return "truncated JSON (the line ends mid-row)"
    return f"not JSON ({message})"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
