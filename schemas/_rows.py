"""NeMo Gym's JSONL rows: the task row that goes in and the rollout row that comes out.

A row is a JSON object whose top-level fields GymBus does not know pass through
untouched (`expected_answer`, `verifier_metadata`, ...). The structs here are *views*:
they decode the fields GymBus reads and ignore the rest, so the row itself travels as
JSON and nothing a verifier needs is lost on the way.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from ._responses import Response, ResponsesCreateParams

__all__ = [
    "AGENT_REF",
    "ATTEMPT_INDEX",
    "FAILURE_CLASS",
    "FAILURE_MESSAGE",
    "RESPONSE",
    "RESPONSES_CREATE_PARAMS",
    "REWARD",
    "ROLLOUT_INDEX",
    "STATS",
    "TASK_INDEX",
    "AgentRef",
    "Rollout",
    "RolloutStats",
    "RolloutSummary",
    "TaskRow",
    "failure_row",
    "merge_row",
    "row_fields",
]

RESPONSES_CREATE_PARAMS = "responses_create_params"
AGENT_REF = "agent_ref"
TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
ATTEMPT_INDEX = "_ng_attempt_index"
RESPONSE = "response"
REWARD = "reward"
FAILURE_CLASS = "_ng_failure_class"
FAILURE_MESSAGE = "_ng_failure_message"
INPUT_LINE = "_ng_input_line"
"""On a failure row for an input line that could not run: that line's number (1-based)."""
STATS = "_gymbus"


class RolloutStats(Struct, kw_only=True, gc=False):
    """How a rollout ran: GymBus's own bookkeeping, under `_gymbus` in a rollout row."""

    attempt: int = 0
    """Earlier attempts of this rollout that failed and were retried by `--resume`."""
    delivery: int = 1
    """Deliveries of the task to an agent worker (more than 1 after a worker died)."""
    model_retries: int = 0
    """Model calls tried again after a transient failure (rate limit, 5xx, timeout)."""
    call_retries: int = 0
    """Seed, tool and verify calls tried again after a transient failure."""
    restarts: int = 0
    """Times the rollout started over from a fresh session within this delivery: a call's
    worker went silent mid-call, or the session's state was lost. Each pays its model
    calls again; on a healthy bus it stays 0."""


class AgentRef(Struct, kw_only=True, gc=False):
    """Which agent runs a row: `name` is the agent's name (e.g. `mcqa_simple_agent`)."""

    type: str | UnsetType = UNSET
    name: str


class TaskRow(Struct, kw_only=True, gc=False):
    """One input JSONL row, as GymBus reads it. Other top-level fields pass through."""

    responses_create_params: ResponsesCreateParams
    agent_ref: AgentRef | None | UnsetType = UNSET
    task_index: int | UnsetType = field(default=UNSET, name=TASK_INDEX)
    rollout_index: int | UnsetType = field(default=UNSET, name=ROLLOUT_INDEX)


class RolloutSummary(Struct, kw_only=True, gc=False):
    """The few fields of a rollout row the runner needs; decoding skips the rest."""

    reward: float = 0.0
    agent_ref: AgentRef | None | UnsetType = UNSET
    task_index: int | UnsetType = field(default=UNSET, name=TASK_INDEX)
    rollout_index: int | UnsetType = field(default=UNSET, name=ROLLOUT_INDEX)
    attempt_index: int | UnsetType = field(default=UNSET, name=ATTEMPT_INDEX)
    failure_class: str | UnsetType = field(default=UNSET, name=FAILURE_CLASS)
    failure_message: str | UnsetType = field(default=UNSET, name=FAILURE_MESSAGE)
    input_line: int | UnsetType = field(default=UNSET, name=INPUT_LINE)
    stats: RolloutStats | UnsetType = field(default=UNSET, name=STATS)


class Rollout(RolloutSummary, kw_only=True, gc=False):
    """One output JSONL row: the task row, plus `response` and `reward`.

    Verifier-specific fields (`extracted_answer`, `library_reward`, ...) and the input
    row's own fields sit beside these at the top level. A failed rollout carries
    `_ng_failure_class` and `_ng_failure_message` and goes to `<stem>_failures.jsonl`.
    """

    responses_create_params: ResponsesCreateParams
    response: Response | UnsetType = UNSET


_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode = msgspec.json.Encoder().encode


def row_fields(row: bytes) -> dict[str, msgspec.Raw]:
    """The top-level fields of a JSON object row, each still encoded."""
    fields = _fields_decoder.decode(row)
    if not isinstance(fields, dict):
        raise msgspec.ValidationError("a row must be a JSON object")
    return fields


def failure_row(row: bytes, failure_class: str, message: str, **more: Any) -> bytes:
    """`row` marked as a failed rollout: reward 0 and NeMo Gym's `_ng_failure_class` and
    `_ng_failure_message`, then `more` (the fields that name it, say); just those fields
    when `row` is empty, not a JSON object, or nested too deep to read. Every failure row
    GymBus writes is made here."""
    fields: dict[str, Any] = {REWARD: 0.0, FAILURE_CLASS: failure_class, FAILURE_MESSAGE: message, **more}
    try:
        return merge_row(row, **fields)
    except (msgspec.DecodeError, RecursionError):
        return _encode(fields)


def merge_row(row: bytes, *objects: bytes, **fields: Any) -> bytes:
    """`row` with the top-level fields of each JSON object in `objects`, then `fields`,
    set on it (later ones win). Untouched fields keep their exact encoding."""
    merged = row_fields(row)
    for obj in objects:
        merged.update(row_fields(obj))
    for name, value in fields.items():
        merged[name] = msgspec.Raw(_encode(value))
    return _encode(merged)
