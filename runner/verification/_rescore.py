"""One stored rollout row, checked for re-verification, and what its new verdict makes of it.

A stored row is a line of a rollouts file: GymBus's own output, or NeMo Gym's (whose
rows may lack `agent_ref`; `--agent` names it then). It must hold what a verifier
reads: `responses_create_params` and `response`. Its `reward`, if it is a number, is
the stored reward the new one is compared with.

The rescored row is the stored row with the verifier's reply (`reward` and its extra
fields) set on it, and any `_ng_failure_*` marks removed, since the row now has a
verdict. Fields the reply does not name are kept as they were, including extras an
older verifier wrote; GymBus cannot tell them from the row's own fields.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import Struct

from gymbus.bus import subjects
from gymbus.functions import Agent
from gymbus.schemas import (
    AGENT_REF,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    INPUT_LINE,
    RESPONSE,
    REWARD,
    ROLLOUT_INDEX,
    TASK_INDEX,
    InputError,
    RemoteError,
    Response,
    RolloutFailed,
    VerifyResult,
    failure_row,
    row_fields,
)

from .._input import _located, check_row, nearest

__all__ = [
    "INPUT_LINE",
    "REWARD_TOLERANCE",
    "Disagreement",
    "Stored",
    "agrees",
    "read_stored",
    "rescored_row",
    "stored_reward",
    "unverified_row",
    "verify_error",
]

REWARD_TOLERANCE = 1e-6
"""Stored and new rewards closer than this (absolute) agree; rewards are mostly in [0, 1]."""

_REMOTE_FIELD = re.compile(r" - at `\$\.?([^`]*)`$")
_REMOTE_MISSING = re.compile(r"missing required field `([^`]*)`")
_reward_decoder = msgspec.json.Decoder(float | None)
_index_decoder = msgspec.json.Decoder(int | None)
_verdict_decoder = msgspec.json.Decoder(VerifyResult)


class _WithResponse(Struct):
    response: Response


_response_decoder = msgspec.json.Decoder(_WithResponse)


@dataclass(frozen=True)
class Stored:
    """A stored rollout that can be re-verified: `body` is its line, sent as it is."""

    line: int
    body: bytes
    agent: str
    environment: str
    reward: float | None
    """The stored reward, or `None` when the row has none (or it is not a number)."""
    task_index: int | None
    rollout_index: int | None


def read_stored(
    line: bytes, path: str, number: int, default_agent: str | None, known: Mapping[str, Agent]
) -> Stored:
    """Check one stored row. `InputError` names the file, line and field of what is wrong;
    `RolloutFailed("unknown_agent")` names an agent that has no built-in environment."""
    row = check_row(line, path, number)
    if RESPONSE not in row.fields:
        raise InputError(
            "missing (a stored rollout needs its response)", path=path, line=number, field=RESPONSE
        )
    try:
        _response_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise _located(exc, path, number) from None
    agent = _agent(row.agent or default_agent, path, number, known)
    return Stored(
        line=number,
        body=line,
        agent=agent,
        environment=known[agent].environment,
        reward=stored_reward(row.fields.get(REWARD)),
        task_index=_number(row.fields.get(TASK_INDEX), _index_decoder),
        rollout_index=_number(row.fields.get(ROLLOUT_INDEX), _index_decoder),
    )


def stored_reward(raw: msgspec.Raw | None) -> float | None:
    """A stored `reward` field's number, or `None` when it is missing or not a number."""
    return _number(raw, _reward_decoder)


def _agent(agent: str | None, path: str, number: int, known: Mapping[str, Agent]) -> str:
    if agent is None:
        raise InputError("missing, and no --agent was given", path=path, line=number, field=AGENT_REF)
    if not subjects.is_name(agent):
        raise InputError(f"{agent!r} is not a valid agent name", path=path, line=number, field=AGENT_REF)
    if agent not in known:
        where = f"{path}:{number}: field `{AGENT_REF}`"
        hint = nearest(agent, known) or f" (built-in: {', '.join(sorted(known))})"
        message = f"agent {agent!r} has no built-in environment to verify with{hint}"
        raise RolloutFailed("unknown_agent", f"{where}: {message}")
    return agent


def _number(raw: msgspec.Raw | None, decoder: msgspec.json.Decoder[Any]) -> Any:
    if raw is None:
        return None
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError:
        return None


def rescored_row(body: bytes, reply: bytes) -> tuple[bytes, dict[str, msgspec.Raw], float]:
    """The stored row with the verifier's reply set on it, its fields, and the new reward.

    `RolloutFailed("verify_failed")` if the reply is not a verdict with a numeric reward.
    """
    try:
        reward = _verdict_decoder.decode(reply).reward
        fields = row_fields(body)
        verdict = row_fields(reply)
    except msgspec.DecodeError as exc:
        raise RolloutFailed("verify_failed", f"the verifier's reply is not a verdict ({exc})") from None
    if FAILURE_CLASS in verdict:  # e.g. a judge that failed: no verdict at all, not a 0
        failure = _text(verdict[FAILURE_CLASS]) or "verify_failed"
        raise RolloutFailed(failure, _text(verdict.get(FAILURE_MESSAGE)) or "the verifier reported a failure")
    fields.pop(FAILURE_CLASS, None)
    fields.pop(FAILURE_MESSAGE, None)
    fields.update(verdict)
    return msgspec.json.encode(fields), fields, reward


def _text(raw: msgspec.Raw | None) -> str:
    if raw is None:
        return ""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return ""
    return value if isinstance(value, str) else ""


def unverified_row(body: bytes, number: int, failure_class: str, message: str) -> bytes:
    """A failure row for a stored row that could not be verified, marked with its line."""
    return failure_row(body, failure_class, message, **{INPUT_LINE: number})


def verify_error(exc: RemoteError, path: str, number: int) -> str:
    """An error reply of the verifier as `file:line: field `f`: ...` when it names a field
    (a request the environment's verify view rejected), else `file:line: ...`."""
    text = exc.message
    where = _REMOTE_FIELD.search(text)
    missing = _REMOTE_MISSING.search(text)
    field = where.group(1) if where else ""
    if missing:
        field = f"{field}.{missing.group(1)}" if field else missing.group(1)
    text = _REMOTE_FIELD.sub("", text)
    subject = f" [{exc.subject}]" if exc.subject else ""
    located = f"{path}:{number}: field `{field}`" if field else f"{path}:{number}"
    return f"{located}: verify failed ({exc.type}): {text}{subject}"


def agrees(stored: float, new: float) -> bool:
    """Whether two rewards are the same up to `REWARD_TOLERANCE`."""
    return math.isclose(stored, new, rel_tol=0.0, abs_tol=REWARD_TOLERANCE)


@dataclass(frozen=True)
class Disagreement:
    """A row whose new reward differs from its stored one."""

    path: str
    line: int
    agent: str
    task_index: int | None
    rollout_index: int | None
    stored: float
    new: float

    def describe(self) -> str:
        """`rollouts.jsonl:7 (task 3, rollout 1): stored 0.0, new 1.0`."""
        key = ""
        if self.task_index is not None:
            key = f" (task {self.task_index}" + (
                f", rollout {self.rollout_index})" if self.rollout_index is not None else ")"
            )
        return f"{self.path}:{self.line}{key}: stored {self.stored}, new {self.new}"

    def row(self) -> bytes:
        """One line of `<stem>_disagreements.jsonl`."""
        return msgspec.json.encode(
            {
                INPUT_LINE: self.line,
                TASK_INDEX: self.task_index,
                ROLLOUT_INDEX: self.rollout_index,
                AGENT_REF: {"name": self.agent},
                "stored_reward": self.stored,
                REWARD: self.new,
            }
        )
