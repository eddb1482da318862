"""Helpers for verifier tests: hand-built responses and verify requests from plain rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from gymbus.functions import Session
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import VerifyResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def message(text: str) -> dict[str, Any]:
    """An assistant message item with one `output_text` part."""
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    """A `function_call` item; dict arguments are JSON-encoded."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name, "arguments": encoded}


def response(*output: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "created_at": 0, "model": "m", "output": list(output)}


async def verify(env: str, row: dict[str, Any], *output: dict[str, Any]) -> dict[str, Any]:
    """Run `env`'s verify on `row` with a response made of `output` items; the result as JSON."""
    environment = ENVIRONMENTS[env]
    body = {"responses_create_params": {"input": "task"}, **row, "response": response(*output)}
    request = msgspec.convert(body, environment.verify_request)
    result = await environment.verify(request, Session(id="test"))
    assert isinstance(result, VerifyResult)
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(result))
    return decoded


def example_rows(env: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXAMPLES / f"{env}.jsonl").read_text().splitlines()]
