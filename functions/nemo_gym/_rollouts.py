"""Which rollout a hosted NeMo Gym agent's call belongs to.

One agent process runs many rollouts at once, and its calls to the resources server and
to the models reach the bridge's loopback shims with nothing NeMo Gym itself says about
the rollout they are for. So the bridge tags each rollout with a token the agent carries
along unchanged, in the places NeMo Gym's agents pass on:

- the row, as the top-level field `_gymbus_rollout`: agents send the row (its extra fields
  kept) to `/seed_session`, `/reset`, `/step` and `/verify`;
- `responses_create_params.metadata["gymbus_rollout"]`: agents send the row's parameters,
  their metadata kept, to the model;
- the cookie `gymbus_rollout`, on `/run` and on every reply of the resources shim: agents
  thread a resources server's cookies into its tool calls (how NeMo Gym keeps a session);
- NeMo Gym's own rollout id, `_ng_rollout_id` in the row: with `observability_enabled` in
  the agent's global config (`_config.agent_config`), 0.7.0's client prefixes every call the
  agent makes to its resources server and its models with `/ng-rollout/<id>/`, whatever the
  agent sends (`toolsandbox_agent` seeds with `{"task_idx": ...}` alone and threads no
  cookie). The field itself never leaves the agent: its request models exclude it.

The shims take the token out before anything reaches the bus, and look up the rollout's
`Calls` (its session, deadline and retry rules), so each call is made as the rollout's
own. `untag` restores the rollout row the agent returns.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from .._spec import Calls

__all__ = [
    "COOKIE",
    "FIELD",
    "METADATA_KEY",
    "Rollout",
    "Rollouts",
    "take_field",
    "take_path",
    "tag",
    "untag",
]

FIELD = "_gymbus_rollout"
METADATA_KEY = "gymbus_rollout"
COOKIE = "gymbus_rollout"
_NEMO_GYM_ID = "_ng_rollout_id"
_PATH_PREFIX = re.compile(r"^/ng-rollout/(?P<id>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<rest>/.*)$")
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
    return _encode({**fields, _PARAMS: params, FIELD: token, _NEMO_GYM_ID: token})


def take_path(path: str) -> tuple[str | None, str]:
    """The token NeMo Gym's `/ng-rollout/<id>/` prefix carries, and the path without it."""
    match = _PATH_PREFIX.match(path)
    return (match["id"], match["rest"]) if match else (None, path)


def take_field(body: bytes) -> tuple[str | None, bytes]:
    """The token a resources call's body carries, and the body without it (as it was:
    an agent that keeps a row's extra fields, 0.4.0's, sends on NeMo Gym's id too)."""
    if FIELD.encode() not in body:
        return None, body
    try:
        fields = _fields.decode(body)
        token = msgspec.json.decode(fields.pop(FIELD), type=str)
    except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
        return None, body
    if bytes(fields.get(_NEMO_GYM_ID, b"")) == _encode(token):
        del fields[_NEMO_GYM_ID]
    return token, _encode(fields)


def untag(reply: bytes, row: bytes) -> bytes:
    """The rollout row: the task row's fields, then the agent's reply's, without the token
    (the parameters' `metadata` as the row had it)."""
    task = _fields.decode(row)
    fields = {**task, **_fields.decode(reply)}
    fields.pop(FIELD, None)
    fields.pop(_NEMO_GYM_ID, None)
    if _NEMO_GYM_ID in task:
        fields[_NEMO_GYM_ID] = task[_NEMO_GYM_ID]
    if _PARAMS in fields:
        params = msgspec.json.decode(fields[_PARAMS], type=dict[str, Any])
        metadata = {k: v for k, v in (params.get("metadata") or {}).items() if k != METADATA_KEY}
        original = msgspec.json.decode(task.get(_PARAMS, b"{}"), type=dict[str, Any])
        if metadata or original.get("metadata") is not None:
            params["metadata"] = metadata or original.get("metadata")
        else:
            params.pop("metadata", None)
        fields[_PARAMS] = msgspec.Raw(_encode(params))
    return _encode(fields)
