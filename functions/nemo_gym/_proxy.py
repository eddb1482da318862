"""A hosted NeMo Gym server as an environment: seed, tools and verify POST to it.

NeMo Gym keeps a rollout's state in the server process, in dicts keyed by the session id
its signed session cookie carries; a request without that cookie (or with one the
process never issued state for) silently gets a fresh, empty session. So a session must
stay on the process that seeded it, and its cookie must travel with every call:

- Seeding posts the row to `/seed_session` (a Gymnasium-style server's `/reset`, which
  answers with the first observation) and saves, in the rollout's session state on the bus
  (never in this process), a `SessionRecord`: this replica's id and the cookie the server
  set.
- A tool call or verify loads the record. One made on another replica raises
  `SessionElsewhere`: the host forwards the call to that replica's own subject (and if
  that replica is gone, the call fails with `SessionLost`, and the rollout runs again from
  a fresh seed). One made here posts with the cookie. A tool call with no record (a
  session never seeded, or expired) is `NotFound`, never a silent fresh session.
- Verify with no record (a stored rollout re-verified in a fresh session, as `gym-runner
  verify` and NeMo Gym's `reverify` do) posts without a cookie. A Gymnasium-style server
  has no `/verify`: its episode is replayed in a fresh session (`_replay`).
- If the server has died, calls of its sessions fail with `SessionLost`; seeds fail as
  `UpstreamFailed`, which callers try again (on another replica).

Bodies pass through as bytes: the row as the caller sent it, and the tool's output as the
server wrote it (NeMo Gym gives the model the response body as text). The verify reply
loses the `responses_create_params` and `response` NeMo Gym's servers echo back: the
rollout keeps the row's own and the agent's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from gymbus.schemas import (
    DEFAULT_TIMEOUTS,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    NotFound,
    SessionLost,
    Timeouts,
    UpstreamFailed,
)

from .._spec import Session
from ._http import Reply, ServerClient, ServerGone
from ._replay import replay

__all__ = ["Proxy", "SessionElsewhere", "SessionRecord"]

_ECHOED = ("responses_create_params", "response")
_FAILURE_TEXTS = ("_ng_failure_judge_error", "failure_reason")
_RESPONSE_DEFAULTS: dict[str, Any] = {"parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
_USAGE_DEFAULTS: dict[str, Any] = {
    "input_tokens": 0,
    "output_tokens": 0,
    "total_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_encode = msgspec.json.Encoder().encode


class SessionRecord(msgspec.Struct, kw_only=True):
    """A rollout's NeMo Gym session, kept in the bus's session state."""

    replica: str
    """The replica whose server process holds the session."""
    cookie: str | None = None
    """The value of the server's session cookie."""


class SessionElsewhere(Exception):
    """The session lives on `replica`: the call belongs there."""

    def __init__(self, replica: str) -> None:
        super().__init__(f"session held by replica {replica}")
        self.replica = replica


class Proxy:
    """Seed, tool and verify of the server `name` behind `client`, for replica `replica`.
    `down()` says why the server is gone, or `None` while it runs."""

    def __init__(
        self,
        name: str,
        replica: str,
        client: ServerClient,
        down: Callable[[], str | None],
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        verify_outputs: tuple[str, ...] = ("reward",),
        routes: tuple[str, ...] = ("/seed_session", "/verify"),
    ) -> None:
        self.verify_outputs = frozenset(verify_outputs)
        self.gymnasium = "/verify" not in routes and {"/reset", "/step"} <= set(routes)
        """A Gymnasium-style server: `/reset` seeds, and verifying replays the episode."""
        self.seed_path = "/reset" if self.gymnasium else "/seed_session"
        self.name = name
        self.replica = replica
        self.client = client
        self.down = down
        self.timeouts = timeouts

    async def seed(self, body: bytes, session: Session) -> bytes:
        """Post the row to `/seed_session` (or `/reset`); remember where the session lives,
        and its cookie. The server's reply (a Gymnasium server's first observation)."""
        try:
            reply = await self.client.post(self.seed_path, body, None, self.timeouts.seed, session.deadline)
        except ServerGone as exc:
            raise UpstreamFailed(
                f"NeMo Gym server {self.name} is down ({self._why(exc)}): seed it elsewhere"
            ) from None
        await session.save(SessionRecord(replica=self.replica, cookie=reply.cookie))
        return reply.body or b"{}"

    async def tool(self, tool: str, body: bytes, session: Session) -> bytes:
        """Post the arguments to `/<tool>` in the session's server session: its output."""
        record = await session.load(SessionRecord)
        if record is None:
            raise NotFound(f"session {session.id!r} of {self.name} was never seeded, or it expired")
        self._check_here(record)
        reply = await self._post(f"/{tool}", body, record, self.timeouts.tool, session)
        if _payload(reply.cookie) not in (None, _payload(record.cookie)):
            # The server kept something in the cookie itself: the next call must carry it.
            await session.save(SessionRecord(replica=self.replica, cookie=reply.cookie))
        return reply.body

    async def verify(self, body: bytes, session: Session) -> bytes:
        """Post the rollout to `/verify`: the reward and the server's other fields."""
        if self.gymnasium:
            try:
                return await replay(
                    self.client, body, _complete_response, self.timeouts.verify, session.deadline
                )
            except ServerGone as exc:
                why = self._why(exc)
                raise UpstreamFailed(f"NeMo Gym server {self.name} did not answer: {why}") from None
        record = await session.load(SessionRecord)
        if record is not None:
            self._check_here(record)
        request = _completed(body, self.verify_outputs)
        reply = await self._post("/verify", request, record, self.timeouts.verify, session)
        return _without_echo(reply.body)

    def _check_here(self, record: SessionRecord) -> None:
        if record.replica != self.replica:
            raise SessionElsewhere(record.replica)

    async def _post(
        self, path: str, body: bytes, record: SessionRecord | None, timeout: float, session: Session
    ) -> Reply:
        cookie = record.cookie if record is not None else None
        try:
            return await self.client.post(path, body, cookie, timeout, session.deadline)
        except ServerGone as exc:
            if record is not None and self.down() is not None:
                raise SessionLost(
                    f"NeMo Gym server {self.name} died ({self.down()}) holding session {session.id!r}: "
                    "its state is lost"
                ) from None
            raise UpstreamFailed(
                f"NeMo Gym server {self.name} did not answer {path}: {self._why(exc)}"
            ) from None

    def _why(self, exc: ServerGone) -> str:
        return self.down() or str(exc)


def _payload(cookie: str | None) -> str | None:
    """A Starlette session cookie's data, without its timestamp and signature (which change
    on every response)."""
    return None if cookie is None else cookie.split(".", 1)[0]


def _completed(body: bytes, outputs: frozenset[str]) -> bytes:
    """The verify request as NeMo Gym's agent sends it: no field the verifier itself adds
    (`outputs`: a stored rollout's `reward`, `extracted_answer`, ... when it is verified
    again), and a `response` with the fields NeMo Gym requires that a GymBus response (or
    an older rollout's) may leave out, filled in as an OpenAI response fills them: its
    `parallel_tool_calls`, `tool_choice` and `tools` from the request's parameters, its
    `usage` counts 0."""
    try:
        fields = _fields.decode(body)
        response = msgspec.json.decode(fields["response"], type=dict[str, Any])
        params = msgspec.json.decode(fields.get("responses_create_params", b"{}"), type=dict[str, Any])
    except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
        return body  # the server will say what is wrong with it
    changed = _complete_response(response, params)
    if not changed and outputs.isdisjoint(fields):
        return body
    fields = {key: value for key, value in fields.items() if key not in outputs}
    fields["response"] = msgspec.Raw(_encode(response))
    return _encode(fields)


def _complete_response(response: dict[str, Any], params: dict[str, Any]) -> bool:
    """Fill in what `response` lacks (see `_completed`); whether anything was."""
    changed = False
    for key, default in _RESPONSE_DEFAULTS.items():
        if response.get(key) is None:
            given = params.get(key)
            response[key] = given if given is not None else default
            changed = True
    usage = response.get("usage")
    if isinstance(usage, dict):
        for key, default in _USAGE_DEFAULTS.items():
            if usage.get(key) is None:
                usage[key] = dict(default) if isinstance(default, dict) else default
                changed = True
    return changed


def _without_echo(body: bytes) -> bytes:
    """The verify reply without what the server echoes; a failure it reports (NeMo Gym's
    `judge_failed`, with the judge's error in `_ng_failure_judge_error` or `failure_reason`)
    gets that error as its `_ng_failure_message`, the field GymBus reports failures by."""
    try:
        fields = _fields.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return body
    reply = {key: value for key, value in fields.items() if key not in _ECHOED}
    if FAILURE_CLASS in reply and FAILURE_MESSAGE not in reply:
        said = next((reply[key] for key in _FAILURE_TEXTS if key in reply), None)
        if said is not None:
            reply[FAILURE_MESSAGE] = said
    return _encode(reply)
