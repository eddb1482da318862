"""`math_with_judge`: math answers checked by `math-verify`, with an optional LLM judge
(NeMo Gym's `math_with_judge`).

No tools. Verify joins the rollout's assistant `output_text` and:

1. `math-verify` compares the gold `\\boxed{<expected_answer>}` (outer `$...$` / `\\(...\\)`
   stripped) with the whole response, in a child process with a timeout
   (`library_verifier_timeout_seconds`, 10 s); a timeout or an error scores 0.0. The response
   needs no `\\boxed{}`: math-verify reads a plain answer too ("3" against "3" is 1.0). This
   is `library_reward`; without the judge it is the reward.
2. With `should_use_judge` (off, as in NeMo Gym's shipped config) and `library_reward` ≤ 0.5,
   a judge model is asked whether the expected answer and the response's answer (math-verify's
   `extracted_answer`, else the whole response) are equivalent, first in that order and, if
   it says equal, again with the two swapped; the reward is 1.0 only if both say `[[A=B]]`
   (the first label found in the judge's text wins; no label reads as not equal). The judge
   sees NeMo Gym's own system message and prompt (`judge_prompts/`). A judge that fails
   makes the rollout a `judge_failed` failure, never a wrong answer (see `_judge`).

The result reports `expected_answer`, `extracted_answer` (math-verify's reading of the
response), `library_reward` and `judge_evaluations` (the judge calls, or `null`). A row
without a string `expected_answer` gets reward 0.0 and an `error_type`; a response with no
text is graded as NeMo Gym grades it (0.0 from math-verify, then the judge if on) and marked
`error_type: empty_response`. Without a string `question` (NeMo Gym requires one), the judge
is shown the prompt's last user message.

Metrics (as NeMo Gym's): `pass@{k}`, `pass@1[avg-of-{k}]` and `majority@{k}` of
`symbolic_accuracy` (= `library_reward`), `judge_accuracy` (= reward, for judged rollouts)
and `no_answer`, in percent.

Settings (`GYMBUS_MATH_WITH_JUDGE`, see `_settings`), NeMo Gym's names and shipped defaults:
`should_use_judge` (false), `judge_model_server` (the judge model: a name or
`{"type": ..., "name": ...}`; default `policy_model`, the policy), `judge_responses_create_params`
(e.g. `{"temperature": 0}`), `library_verifier_timeout_seconds` (10),
`library_verifier_max_concurrency` (32 checks at once per worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from gymbus.schemas import VerifyRequest, VerifyResult, input_items, item_text, output_text

from .._spec import Environment, Session, TaskMetrics
from ._judge import (
    POLICY_MODEL,
    JudgeEvaluation,
    JudgeFailed,
    JudgeUnavailable,
    ModelServerRef,
    ask_judge,
    first_label,
    judge_failed,
    judge_model,
    judge_params,
    judge_prompt,
    judge_text,
)
from ._math_library import library_check, load_library
from ._pass_k import Scored, answer_digest, field_value, highest_k, pass_majority, per_task_summary
from ._settings import settings

__all__ = [
    "ENVIRONMENT",
    "JUDGE_PROMPT",
    "JUDGE_SYSTEM",
    "MathRequest",
    "MathResult",
    "MathSettings",
    "verify",
]

NAME = "math_with_judge"
EQUAL, NOT_EQUAL = "[[A=B]]", "[[A!=B]]"

JUDGE_SYSTEM = judge_prompt("math_with_judge_system")
"""NeMo Gym's judge system message (adapted there from Arena Hard)."""
JUDGE_PROMPT = judge_prompt("math_with_judge_prompt")
"""NeMo Gym's judge user message: `{question}`, `{first_answer}`, `{second_answer}`."""


class MathSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    should_use_judge: bool = False
    judge_model_server: str | ModelServerRef = msgspec.field(default_factory=lambda: POLICY_MODEL)
    judge_responses_create_params: dict[str, Any] = msgspec.field(default_factory=dict)
    library_verifier_timeout_seconds: Annotated[float, Meta(gt=0)] = 10.0
    library_verifier_max_concurrency: Annotated[int, Meta(gt=0)] = 32


class MathRequest(VerifyRequest, kw_only=True):
    """The row fields read; loosely typed so a malformed row is graded 0 with a reason."""

    question: Any = None
    expected_answer: Any = None


class MathResult(VerifyResult, kw_only=True):
    expected_answer: str
    extracted_answer: str | None
    library_reward: float
    judge_evaluations: list[JudgeEvaluation] | None = None
    error_type: str | UnsetType = UNSET


def _question(request: MathRequest) -> str:
    if isinstance(request.question, str):
        return request.question
    users = [item for item in input_items(request.responses_create_params) if item.role == "user"]
    return item_text(users[-1]) if users else ""


async def _judge_once(
    session: Session, config: MathSettings, question: str, first: str, second: str
) -> tuple[bool, JudgeEvaluation]:
    prompt = JUDGE_PROMPT.format(question=question, first_answer=first, second_answer=second)
    params = judge_params(config.judge_responses_create_params, JUDGE_SYSTEM, prompt)
    response = await ask_judge(session, judge_model(config.judge_model_server), params)
    label = first_label(judge_text(response), EQUAL, NOT_EQUAL)
    return label == EQUAL, JudgeEvaluation(responses_create_params=params, response=response)


async def _judge(
    session: Session, config: MathSettings, question: str, expected: str, answer: str
) -> tuple[float, list[JudgeEvaluation]]:
    """Both orders, to cancel the judge's position bias: 1.0 only if both say equal."""
    equal, first = await _judge_once(session, config, question, expected, answer)
    if not equal:
        return 0.0, [first]
    equal, second = await _judge_once(session, config, question, answer, expected)
    return float(equal), [first, second]


async def grade(request: MathRequest, session: Session, config: MathSettings) -> MathResult:
    """The verify result of one rollout under `config` (see the module docstring)."""
    expected = request.expected_answer
    if not isinstance(expected, str) or not expected.strip():
        kind = (
            "missing_expected_answer"
            if expected is None or isinstance(expected, str)
            else "invalid_expected_answer"
        )
        gold = expected if isinstance(expected, str) else ""
        return MathResult(
            reward=0.0, expected_answer=gold, extracted_answer=None, library_reward=0.0, error_type=kind
        )
    text = output_text(request.response)
    library, extracted = await library_check(
        expected, text, config.library_verifier_timeout_seconds, config.library_verifier_max_concurrency
    )
    result = MathResult(
        reward=library,
        expected_answer=expected,
        extracted_answer=extracted,
        library_reward=library,
        error_type="empty_response" if not text.strip() else UNSET,
    )
    if config.should_use_judge and library <= 0.5:
        result.reward, result.judge_evaluations = await _judge(
            session, config, _question(request), expected, extracted or text
        )
    return result


async def verify(request: MathRequest, session: Session) -> MathResult | JudgeFailed:
    """Grade the rollout; a failed judge makes it a `judge_failed` failure row."""
    try:
        return await grade(request, session, settings(MathSettings, NAME))
    except JudgeUnavailable as exc:
        return judge_failed(exc)


def _project(fields: Mapping[str, msgspec.Raw]) -> Scored:
    scores: dict[str, float] = {}
    if "library_reward" in fields:
        scores["symbolic_accuracy"] = float(field_value(fields, "library_reward"))
    judged = fields.get("judge_evaluations")
    if judged is not None and memoryview(judged) != b"null":  # compared in place: no copy
        scores["judge_accuracy"] = float(field_value(fields, "reward") or 0.0)
    return Scored(scores, answer_digest(field_value(fields, "extracted_answer")))


def _compute(tasks: list[list[Scored]]) -> dict[str, Any]:
    return pass_majority(tasks)


def _key_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """NeMo Gym's math headline: token means and the highest-k accuracies."""
    key: dict[str, Any] = {
        name: metrics[name] for name in ("mean/input_tokens", "mean/output_tokens") if name in metrics
    }
    key.update(highest_k(metrics, "pass@1[avg-of-{k}]"))
    key.update(highest_k(metrics, "pass@{k}", exclude=("no_answer",)))
    key.update(highest_k(metrics, "majority@{k}", exclude=("no_answer",)))
    return key


ENVIRONMENT = Environment(
    name=NAME,
    settings=MathSettings,
    verify=verify,
    verify_request=MathRequest,
    agents=("math_with_judge_simple_agent",),
    description="Math answers checked by math-verify, with an optional LLM judge (NeMo Gym's math_with_judge).",
    metrics=TaskMetrics(
        project=_project, compute=_compute, per_task=per_task_summary, key_metrics=_key_metrics
    ),
    startup=load_library,
)
