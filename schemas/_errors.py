"""GymBus's one error tree, mapped one-to-one to the codes of error replies on the wire.

    GymError
    ├── BusError                 the bus itself let us down (raised locally)
    │   ├── BusUnavailable    *  NATS_URL unreachable, or the embedded server failed to start
    │   ├── NoResponders    503* nobody serves the subject (no worker started for it)
    │   ├── RequestTimeout  504* no reply within the call's timeout
    │   ├── NotAuthorized   403  the server refused our credentials, or our role may not use a subject
    │   ├── PayloadTooLarge 413  a message is larger than the server's max payload
    │   └── ClaimStoreFull  507* the claim store (bodies over the max payload) is at its bound
    ├── RemoteError              a function replied with an error
    │   ├── BadRequest      400  the request did not decode or validate
    │   ├── NotFound        404  no such tool, or a session that was never seeded or expired
    │   │   └── UnknownTool      the environment is up but serves no tool of that name
    │   ├── SessionLost     410  the session's state died with the process that held it:
    │   │                        its rollout must start again from a fresh seed
    │   ├── DeadlineExceeded 408 the rollout's deadline passed before the work was done
    │   ├── FunctionFailed  500  the function raised an unexpected exception
    │   └── UpstreamFailed  502* a service behind the function failed (model endpoint, judge):
    │                            rate limited, 5xx, timed out or unreachable
    ├── InputError               a bad input row, with file, line and field
    └── RolloutFailed            a rollout could not finish; it becomes a failure row
                                 (`_ng_failure_class`) in `<stem>_failures.jsonl`

An error reply carries the NATS Services headers `Nats-Service-Error` (message) and
`Nats-Service-Error-Code` (code) and the body `{"error": {"type": ..., "message": ...}}`;
`from_wire` turns one back into the matching class. `BusError`s of codes 503/504/413 can
also arrive on the wire, from a function whose own downstream call failed that way.
Errors marked `*` are `transient`: the same call may succeed if tried again later.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "BusError",
    "BusUnavailable",
    "ClaimStoreFull",
    "DeadlineExceeded",
    "FunctionFailed",
    "GymError",
    "InputError",
    "NoResponders",
    "NotAuthorized",
    "NotFound",
    "PayloadTooLarge",
    "RemoteError",
    "RequestTimeout",
    "RolloutFailed",
    "SessionLost",
    "UnknownTool",
    "UpstreamFailed",
    "from_wire",
]


class GymError(Exception):
    """Base of every GymBus error. `subject` names the subject involved, if any."""

    code = "500"
    type = "gym_error"
    transient = False
    """Whether trying the same call again later may succeed."""

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.subject = subject

    def __str__(self) -> str:
        return f"{self.message} [{self.subject}]" if self.subject else self.message


# Bus errors
class BusError(GymError):
    """The bus could not carry a message."""

    type = "bus_error"


class BusUnavailable(BusError):
    """The NATS server cannot be reached or started."""

    code = "503"
    type = "bus_unavailable"
    transient = True


class NoResponders(BusError):
    """Nobody serves the subject: start a worker for it (`gym-runner serve ...`)."""

    code = "503"
    type = "no_responders"
    transient = True


class RequestTimeout(BusError):
    """No reply arrived within the call's timeout."""

    code = "504"
    type = "timeout"
    transient = True


class NotAuthorized(BusError):
    """The server refused this process's credentials, or its role's permissions forbid a
    subject it must use: a configuration error, never retried."""

    code = "403"
    type = "not_authorized"


class PayloadTooLarge(BusError):
    """A message is larger than the server's max payload."""

    code = "413"
    type = "payload_too_large"


class ClaimStoreFull(BusError):
    """A body over the max payload could not be stored: the claim store holds its bound of
    bytes (`Limits.claim_store_bytes`). Bodies leave it as they are read or expire, so the
    same call may succeed later."""

    code = "507"
    type = "claim_store_full"
    transient = True


# Remote errors
class RemoteError(GymError):
    """A function answered with an error reply."""

    type = "remote_error"


class BadRequest(RemoteError):
    """The request body did not decode or did not validate."""

    code = "400"
    type = "bad_request"


class NotFound(RemoteError):
    """No such tool, or no such session (never seeded, or expired)."""

    code = "404"
    type = "not_found"


class UnknownTool(NotFound):
    """The environment is up but serves no tool of that name (models invent names). Raised
    by a rollout's calls, where a tool subject has no responder; `NotFound` on the wire.

    A NeMo Gym resources server answers a tool it lacks with FastAPI's 404 body, and NeMo
    Gym's agents hand that body to the model as the tool's output. Whatever answers an
    unknown tool to a model or to a NeMo Gym client answers `body`, so a model sees the
    same on both."""

    body = b'{"detail":"Not Found"}'


class SessionLost(RemoteError):
    """The session's state lived in a process that is gone (a hosted NeMo Gym server that
    died, or its whole worker): the call cannot go on, and its rollout is run again from
    a fresh seed rather than continuing against a state that silently started over."""

    code = "410"
    type = "session_lost"


class DeadlineExceeded(RemoteError):
    """The rollout's deadline passed; the work was dropped rather than done late."""

    code = "408"
    type = "deadline_exceeded"


class FunctionFailed(RemoteError):
    """The function raised an unexpected exception (details are in the worker's log)."""

    code = "500"
    type = "function_failed"


class UpstreamFailed(RemoteError):
    """A service behind the function failed: the model endpoint, a judge, a search API."""

    code = "502"
    type = "upstream_failed"
    transient = True


# Input errors
class InputError(GymError):
    """A bad input row. The message names the file, the line and the field."""

    code = "400"
    type = "invalid_input"

    def __init__(self, message: str, *, path: str, line: int, field: str | None = None) -> None:
        where = f"{path}:{line}" + (f": field `{field}`" if field else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field


# Rollout errors
class RolloutFailed(GymError):
    """A rollout could not finish. `failure_class` names why, as NeMo Gym's
    `_ng_failure_class` does (`model_failed`, `verify_failed`, `deadline_exceeded`, ...)."""

    type = "rollout_failed"

    def __init__(self, failure_class: str, message: str) -> None:
        super().__init__(message)
        self.failure_class = failure_class


_BY_TYPE: dict[str, type[GymError]] = {
    kind.type: kind
    for kind in (
        BusUnavailable,
        NoResponders,
        RequestTimeout,
        NotAuthorized,
        PayloadTooLarge,
        ClaimStoreFull,
        BadRequest,
        NotFound,
        SessionLost,
        DeadlineExceeded,
        FunctionFailed,
        UpstreamFailed,
    )
}
_BY_CODE: dict[str, type[GymError]] = {
    "400": BadRequest,
    "403": NotAuthorized,
    "404": NotFound,
    "410": SessionLost,
    "408": DeadlineExceeded,
    "413": PayloadTooLarge,
    "500": FunctionFailed,
    "502": UpstreamFailed,
    "503": NoResponders,
    "504": RequestTimeout,
    "507": ClaimStoreFull,
}


def from_wire(code: str, type: str | None, message: str, subject: str | None = None) -> GymError:
    """The error an error reply stands for: matched by `type`, else by `code`."""
    kind = _BY_TYPE.get(type or "") or _BY_CODE.get(code, FunctionFailed)
    return kind(message, subject=subject)
