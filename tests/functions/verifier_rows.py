"""Hand-built verify requests and a scripted judge, for the verifier environments' tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from gymbus.functions import Session
from gymbus.schemas import Response, ResponsesCreateParams, VerifyRequest, item_text

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
R = TypeVar("R", bound=VerifyRequest)


def example_rows(environment: str) -> list[dict[str, Any]]:
    """The example task rows of `environment` (NeMo Gym's)."""
    return [json.loads(line) for line in (EXAMPLES / f"{environment}.jsonl").read_text().splitlines() if line]


def response(*texts: str, role: str = "assistant") -> dict[str, Any]:
    """A model response of one message per text (none for no text at all)."""
    output = [
        {
            "type": "message",
            "role": role,
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        for text in texts
    ]
    return {"id": "resp", "created_at": 0, "model": "m", "output": output}


def verify_request(kind: type[R], texts: tuple[str, ...] | str, prompt: str = "Q?", **row: Any) -> R:
    """`kind` for a row with `prompt` and `row`'s fields, answered by `texts`."""
    texts = (texts,) if isinstance(texts, str) else texts
    body = {"responses_create_params": {"input": [{"role": "user", "content": prompt}]}, **row}
    return msgspec.convert({**body, "response": response(*texts)}, kind)


class ScriptedJudge:
    """`Models` for tests: answers each judge prompt with `reply(prompt_text)`, or raises `error`."""

    def __init__(self, reply: Callable[[str], str] | str = "[[A=B]]", error: Exception | None = None):
        self.reply = reply if callable(reply) else (lambda _: reply)
        self.error = error
        self.calls: list[tuple[str, ResponsesCreateParams]] = []

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        self.calls.append((model, params))
        if self.error is not None:
            raise self.error
        assert isinstance(params.input, list)
        verdict = self.reply(item_text(params.input[-1]))
        return msgspec.convert(response(verdict), Response)

    def prompts(self) -> list[str]:
        """The user message of each judge call."""
        return [item_text(params.input[-1]) for _, params in self.calls if isinstance(params.input, list)]

    def session(self) -> Session:
        return Session(id="s", models=self)
