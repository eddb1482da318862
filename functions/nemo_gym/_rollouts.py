"""Which rollout a hosted NeMo Gym agent's call belongs to.

One agent process runs many rollouts at once, and its calls to the resources server and
to the models reach the bridge's loopback shims with nothing NeMo Gym itself says about
the rollout they are for. So the bridge tags each rollout with a token the agent carries
along unchanged, in three places NeMo Gym's agents pass on:

- the row, as the top-level field `_gymbus_rollout`: agents send the row (its extra fields
  kept) to `/seed_session`, `/reset`, `/step` and `/verify`;
- `responses_create_params.metadata["gymbus_rollout"]`: agents send the row's parameters,
  their metadata kept, to the model;
- the cookie `gymbus_rollout`, on `/run` and on every reply of the resources shim: agents
  thread a resources server's cookies into its tool calls (how NeMo Gym keeps a session).

The shims take the token out before anything reaches the bus, and look up the rollout's
`Calls` (its session, deadline and retry rules), so each call is made as the rollout's
own. `untag` restores the rollout row the agent returns.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from .._spec import Calls

__all__ = ["COOKIE", "FIELD", "METADATA_KEY", "Rollout", "Rollouts", "take_field", "tag", "untag"]

FIELD = "_gymbus_rollout"
METADATA_KEY = "gymbus_rollout"
COOKIE = "gymbus_rollout"
_PARAMS = "responses_create_params"
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode = msgspec.json.Encoder().encode


@dataclass
class Rollout:
    """One rollout in flight in the agent process."""

    calls: Calls
    lost: BaseException | None = None
    """What ended a call the rollout cannot go on without (a lost tool call: the rollout
    starts over): raised again by the agent function, whatever the agent made of it."""


class Rollouts:
    """The rollouts in flight, by token."""

    def __init__(self) -> None:
        self.running: dict[str, Rollout] = {}

    def start(self, calls: Calls) -> tuple[str, Rollout]:
        token = uuid.uuid4().hex
        rollout = self.running[token] = Rollout(calls)
        return token, rollout

    def end(self, token: str) -> None:
        self.running.pop(token, None)

    def get(self, token: str | None) -> Rollout | None:
        return self.running.get(token) if token else None


def tag(row: bytes, token: str) -> bytes:
    """`row` carrying `token` (as the field and in its parameters' metadata)."""
    fields = _fields.decode(row)
    params = msgspec.json.decode(fields.get(_PARAMS, b"{}"), type=dict[str, Any])
    params["metadata"] = {**(params.get("metadata") or {}), METADATA_KEY: token}
    return _encode({**fields, _PARAMS: params, FIELD: token})


def take_field(body: bytes) -> tuple[str | None, bytes]:
    """The token a resources call's body carries, and the body without it (as it was)."""
    if FIELD.encode() not in body:
        return None, body
    try:
        fields = _fields.decode(body)
        token = msgspec.json.decode(fields.pop(FIELD), type=str)
    except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
        return None, body
    return token, _encode(fields)


def untag(reply: bytes, row: bytes) -> bytes:
    """The rollout row: the task row's fields, then the agent's reply's, without the token
    (the parameters' `metadata` as the row had it)."""
    fields = {**_fields.decode(row), **_fields.decode(reply)}
    fields.pop(FIELD, None)
    if _PARAMS in fields:
        params = msgspec.json.decode(fields[_PARAMS], type=dict[str, Any])
        metadata = {k: v for k, v in (params.get("metadata") or {}).items() if k != METADATA_KEY}
        original = msgspec.json.decode(_fields.decode(row).get(_PARAMS, b"{}"), type=dict[str, Any])
        if metadata or original.get("metadata") is not None:
            params["metadata"] = metadata or original.get("metadata")
        else:
            params.pop("metadata", None)
        fields[_PARAMS] = msgspec.Raw(_encode(params))
    return _encode(fields)
