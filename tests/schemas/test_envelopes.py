"""The exported envelope schemas describe the messages GymBus really sends, subject and headers
included, and refuse the mistakes a producer in another language makes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus, schemas
from gymbus.schemas._envelopes import ENVELOPES

jsonschema = pytest.importorskip("jsonschema")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "example_single_tool_call.jsonl"


def _schema(kind: str) -> dict[str, Any]:
    path = schemas.SCHEMA_DIR / f"{kind}_envelope.schema.json"
    return msgspec.json.decode(path.read_bytes(), type=dict[str, Any])


def _valid(kind: str, subject: str, headers: dict[str, str], body: Any) -> bool:
    validator = jsonschema.Draft202012Validator(_schema(kind))
    return bool(validator.is_valid({"subject": subject, "headers": headers, "body": body}))


def test_every_envelope_schema_is_a_valid_json_schema() -> None:
    for envelope in ENVELOPES:
        jsonschema.Draft202012Validator.check_schema(_schema(envelope.name))


def test_a_task_as_gym_runner_publishes_it_is_a_valid_task_envelope() -> None:
    row = msgspec.json.decode(EXAMPLE.read_bytes().splitlines()[0])
    headers = bus.run.task_headers("r0123abcd", 7, 0, time.time() + 60, token="0" * 32)
    subject = bus.subjects.tasks("example_single_tool_call_simple_agent")
    assert _valid("task", subject, headers, row)
    assert _valid("task", subject, {}, row)  # every header is optional: no run means gym.results.unrouted
    assert not _valid("task", subject, {**headers, schemas.SEQ: "seven"}, row)
    assert not _valid("task", subject, {**headers, schemas.RUN: "my.run"}, row)
    assert not _valid("task", "gym.tasks.a.b", headers, row)
    assert not _valid("task", subject, headers, {"question": "no responses_create_params"})
    claim = "gym.claims.agent-example_single_tool_call_simple_agent.UABC.0f1e;3;47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    assert _valid("task", subject, {**headers, schemas.CLAIM: claim}, "")  # a claimed body is empty
    assert not _valid("task", subject, {**headers, schemas.CLAIM: "abc"}, "")  # not a claim


def test_an_error_reply_as_a_worker_sends_it_is_a_valid_error_envelope() -> None:
    for error in (schemas.NotFound("no tool named x"), schemas.FunctionFailed("f raised KeyError")):
        body, headers = bus.wire.encode_error_reply(error)
        assert _valid("error_reply", "_INBOX.abc.1", headers, msgspec.json.decode(body))
    assert not _valid("error_reply", "_INBOX.abc.1", {schemas.ERROR: "x", schemas.ERROR_CODE: "418"},
                      {"error": {"type": "t", "message": "m"}})  # fmt: skip


def test_a_result_needs_the_headers_that_route_it_back() -> None:
    row = {"responses_create_params": {"input": "hi"}, "reward": 1.0}
    headers = {schemas.MSG_ID: "r1.0.0", schemas.SEQ: "0", schemas.ATTEMPT: "0", schemas.TASK: "12"}
    assert _valid("result", "gym.results.r1", headers, row)
    assert not _valid("result", "gym.results.r1", {schemas.MSG_ID: "r1.0.0", schemas.SEQ: "0"}, row)
