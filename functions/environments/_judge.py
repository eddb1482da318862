"""LLM-judge plumbing shared by the judge-based environments.

A judge is just another model subject: `session.generate(model, params)` sends the judge
prompt to `gym.model.<model>.responses`, so any model adapter (an OpenAI-compatible
endpoint, or the offline policy in a demo) can judge.

A judge that cannot be reached, times out or fails is **not** a wrong answer: as NeMo Gym's
`judge_failsafe` does, verify then answers with reward 0.0 and
`_ng_failure_class: "judge_failed"` (plus `_ng_failure_judge_error`), so the rollout goes
to `<stem>_failures.jsonl`, is left out of the metrics, and is tried again on `--resume`.
A passed rollout deadline stays `deadline_exceeded`.

The judge is named as in NeMo Gym's config, `judge_model_server`: a server reference
`{"type": "responses_api_models", "name": "judge"}` or just the name. NeMo Gym's name for
the policy, `policy_model`, is GymBus's `policy`. Default prompts are NeMo Gym's own, in
`judge_prompts/` (see its README for their source and license).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from gymbus.schemas import DeadlineExceeded, GymError, Item, Response, ResponsesCreateParams, VerifyResult

from .._spec import Session

__all__ = [
    "POLICY_MODEL",
    "JudgeEvaluation",
    "JudgeFailed",
    "JudgeUnavailable",
    "ModelServerRef",
    "ask_judge",
    "first_label",
    "judge_failed",
    "judge_model",
    "judge_params",
    "judge_prompt",
    "judge_text",
]

_PROMPTS = Path(__file__).resolve().parent / "judge_prompts"
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


class ModelServerRef(Struct, kw_only=True, forbid_unknown_fields=True):
    """NeMo Gym's reference to a model server; `name` is the GymBus model subject."""

    type: str = "responses_api_models"
    name: str


POLICY_MODEL = ModelServerRef(name="policy_model")
"""NeMo Gym's default judge: the policy model itself."""

_ALIASES = {"policy_model": "policy"}


def judge_model(server: str | ModelServerRef) -> str:
    """The model subject a `judge_model_server` setting names (`policy_model` is `policy`)."""
    name = server if isinstance(server, str) else server.name
    return _ALIASES.get(name, name)


@cache
def judge_prompt(name: str) -> str:
    """The text of `judge_prompts/<name>.txt`, surrounding whitespace stripped."""
    return (_PROMPTS / f"{name}.txt").read_text(encoding="utf-8").strip()


class JudgeEvaluation(Struct, kw_only=True):
    """One judge call as the verify result reports it: the request and the judge's response."""

    responses_create_params: ResponsesCreateParams
    response: Response
    verdict_label: str | None | UnsetType = UNSET


class JudgeFailed(VerifyResult, kw_only=True):
    """The verify result of a rollout whose judge failed: a failure row, not a reward."""

    failure_class: str = field(default="judge_failed", name="_ng_failure_class")
    failure_message: str = field(default="", name="_ng_failure_message")
    judge_error: str = field(default="", name="_ng_failure_judge_error")


class JudgeUnavailable(Exception):
    """The judge call failed; verify turns this into `judge_failed(...)`."""


def judge_failed(exc: JudgeUnavailable) -> JudgeFailed:
    message = str(exc)
    return JudgeFailed(reward=0.0, failure_message=message, judge_error=message)


def judge_params(base: dict[str, Any], system: str | None, user: str) -> ResponsesCreateParams:
    """The judge's request: `base` (model, temperature, ...) with the system and user prompts as input."""
    messages = [] if not system else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user})
    return msgspec.convert({**base, "input": messages}, ResponsesCreateParams)


async def ask_judge(
    session: Session, model: str, params: ResponsesCreateParams, max_concurrency: int | None = None
) -> Response:
    """One judge generation; `JudgeUnavailable` when the judge fails (a passed deadline re-raises).
    With `max_concurrency`, at most that many calls to `model` are in flight in this process
    (NeMo Gym's `judge_endpoint_max_concurrency`)."""
    try:
        async with _bounded(model, max_concurrency):
            return await session.generate(model, params)
    except DeadlineExceeded:
        raise
    except GymError as exc:
        raise JudgeUnavailable(f"judge model {model!r} failed: {type(exc).__name__}: {exc}") from None


@contextlib.asynccontextmanager
async def _bounded(model: str, limit: int | None) -> AsyncIterator[None]:
    if limit is None:
        yield
        return
    slots = _slots.setdefault(asyncio.get_running_loop(), {})
    async with slots.setdefault((model, limit), asyncio.Semaphore(limit)):
        yield


def judge_text(response: Response) -> str:
    """The judge's verdict text: the last content part of its last output item, if that item is
    a message and the part is `output_text`; `""` otherwise (which reads as "not equal")."""
    if not response.output:
        return ""
    last: Item = response.output[-1]
    if last.kind != "message" or not isinstance(last.content, list) or not last.content:
        return ""
    part = last.content[-1]
    return part.text if part.type == "output_text" and isinstance(part.text, str) else ""


def first_label(text: str, equal: str, not_equal: str) -> str | None:
    """Whichever of the two labels appears first in `text`, or `None` if neither does."""
    at_equal, at_not_equal = text.find(equal), text.find(not_equal)
    if at_equal < 0 and at_not_equal < 0:
        return None
    if at_equal >= 0 and (at_not_equal < 0 or at_equal < at_not_equal):
        return equal
    return not_equal
