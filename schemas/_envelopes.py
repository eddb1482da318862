"""Whole messages, for clients in other languages: subject, headers and body of each kind.

An envelope's JSON Schema describes one NATS message as the object
`{"subject": ..., "headers": {...}, "body": ...}`: the subject's pattern, the headers
(NATS header values are strings; each has its format), and the body's schema (the wire
struct's). `python -m schemas` writes them as `schemas/json/<kind>_envelope.schema.json`
beside the bodies' schemas. A body too big for one message is sent empty with a
`Gym-Claim` header instead (see `docs/protocol.md`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ._errors import _BY_CODE
from ._headers import (
    ATTEMPT,
    CLAIM,
    DEADLINE,
    DELIVERY,
    ERROR,
    ERROR_CODE,
    MSG_ID,
    RUN,
    SEQ,
    SESSION,
    TASK,
    TOKEN,
    WORKING,
)
from ._responses import Response, ResponsesCreateParams
from ._rows import Rollout, TaskRow
from ._wire import SeedRequest, SeedResult, VerifyRequest, VerifyResult, WireError

__all__ = ["ENVELOPES", "HEADER_VALUES", "Envelope", "envelope_schema"]

_NAME = "[A-Za-z0-9_-]+"
_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}

HEADER_VALUES: dict[str, dict[str, Any]] = {
    MSG_ID: {"type": "string", "minLength": 1,
             "description": "JetStream drops a message whose id it saw in the last 2 minutes: "
                            "`<run>.<seq>.<attempt>` for tasks"},
    RUN: {"type": "string", "pattern": f"^{_NAME}$",
          "description": "the run whose results subject gym.results.<run> gets the result; without one "
                         "(or an invalid one) it goes to gym.results.unrouted"},
    SEQ: {**_DIGITS, "description": "the task's position in its run, 0-based"},
    ATTEMPT: {**_DIGITS, "description": "earlier failed attempts of this rollout (0 the first time)"},
    DEADLINE: {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$",
               "description": "unix time in seconds after which the work is dropped"},
    TOKEN: {"type": "string", "pattern": "^[0-9a-f]{32}$",
            "description": "the producer's HMAC-SHA256 of `<run>.<seq>.<attempt>` (first 32 hex digits), "
                           "copied onto the result"},
    TASK: {**_DIGITS,
           "description": "the task's sequence number in the GYM_TASKS stream (its publish ack's seq)"},
    DELIVERY: {**_DIGITS, "description": "how many times JetStream delivered the task"},
    SESSION: {"type": "string", "minLength": 1, "description": "the rollout's session id"},
    CLAIM: {"type": "string", "pattern": r"^gym\.claims\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+;[0-9]+;[A-Za-z0-9_-]+$",
            "description": "<subject prefix>;<chunks>;<SHA-256, unpadded base64url>: the body is in the "
                           "GYM_CLAIMS stream, chunk i the last message on <prefix>.<i>; the message body is empty"},
    WORKING: {"const": "1", "description": "keep-alive: the request is still being worked on"},
    ERROR: {"type": "string", "description": "what went wrong, one line"},
    ERROR_CODE: {"enum": sorted(_BY_CODE), "description": "the error's code (schemas._errors)"},
}  # fmt: skip
"""The format of each header's value."""


@dataclass(frozen=True)
class Envelope:
    """One kind of message: `subject` is a regular expression; `body` a wire struct, or
    `None` for any JSON value, or `""` for an empty body."""

    name: str
    description: str
    subject: str
    body: Any
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


_REPLY = "^_INBOX\\..+$"

ENVELOPES = (
    Envelope("task", "A rollout task on the durable queue (JetStream stream GYM_TASKS): the task row.",
             f"^gym\\.tasks\\.{_NAME}$", TaskRow, (), (MSG_ID, RUN, SEQ, ATTEMPT, DEADLINE, TOKEN, CLAIM)),
    Envelope("result", "A rewarded rollout (or a failure row, with _ng_failure_class), published by an agent "
             "worker to its task's run (stream GYM_RESULTS).",
             f"^gym\\.results\\.{_NAME}$", Rollout, (MSG_ID, ATTEMPT, TASK), (SEQ, TOKEN, CLAIM)),
    Envelope("agent_run_request", "One whole rollout, synchronously: the task row.",
             f"^gym\\.agent\\.{_NAME}\\.run$", TaskRow, (), (DEADLINE, CLAIM)),
    Envelope("agent_run_reply", "The rollout row.", _REPLY, Rollout, (), (CLAIM,)),
    Envelope("model_request", "One generation: Responses API create parameters.",
             f"^gym\\.model\\.{_NAME}\\.responses$", ResponsesCreateParams, (), (SESSION, DEADLINE, CLAIM)),
    Envelope("model_reply", "The generation: a Responses API response.", _REPLY, Response, (), (CLAIM,)),
    Envelope("seed_request", "Set up a session: the task row.",
             f"^gym\\.env\\.{_NAME}\\.seed$", SeedRequest, (SESSION,), (DEADLINE, CLAIM)),
    Envelope("seed_reply", "The session is set up.", _REPLY, SeedResult, (), (CLAIM,)),
    Envelope("tool_request", "One tool call: the call's arguments (a JSON object; its schema is the tool's).",
             f"^gym\\.env\\.{_NAME}\\.tool\\.{_NAME}$", None, (SESSION,), (DEADLINE, CLAIM)),
    Envelope("tool_reply", "The tool's output (any JSON value).", _REPLY, None, (), (CLAIM,)),
    Envelope("verify_request", "Reward a finished rollout: the task row plus its response.",
             f"^gym\\.env\\.{_NAME}\\.verify$", VerifyRequest, (SESSION,), (DEADLINE, CLAIM)),
    Envelope("verify_reply", "The reward, and the verifier's own fields.",
             _REPLY, VerifyResult, (), (CLAIM,)),
    Envelope("error_reply", "The reply of any request that failed.", _REPLY, WireError, (ERROR, ERROR_CODE)),
    Envelope("working_reply", "A keep-alive while a long request runs (the real reply follows).",
             _REPLY, "", (WORKING,)),
)  # fmt: skip
"""Every kind of message GymBus sends."""


def envelope_schema(envelope: Envelope) -> dict[str, Any]:
    """The JSON Schema of `envelope` (draft 2020-12)."""
    defs: dict[str, Any] = {}
    if envelope.body is None:
        body: dict[str, Any] = {"description": "any JSON value"}
    elif envelope.body == "":
        body = {"const": "", "description": "empty"}
    else:
        (body,), defs = msgspec.json.schema_components([envelope.body], ref_template="#/$defs/{name}")
    if CLAIM in envelope.optional:
        body = {"anyOf": [body, {"const": "", "description": f"empty, when the body is claimed ({CLAIM})"}]}
    names = (*envelope.required, *envelope.optional)
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{envelope.name} envelope",
        "description": f"{envelope.description} A NATS message as {{subject, headers, body}}.",
        "type": "object",
        "properties": {
            "subject": {"type": "string", "pattern": envelope.subject},
            "headers": {
                "type": "object",
                "properties": {name: HEADER_VALUES[name] for name in names},
                "required": list(envelope.required),
                "additionalProperties": {"type": "string"},
            },
            "body": body,
        },
        "required": ["subject", "headers", "body"],
    }
    if defs:
        schema["$defs"] = defs
    return schema
