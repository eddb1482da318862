"""`mcqa`: multiple-choice questions, graded by the letter the answer names (NeMo Gym's `mcqa`).

No tools. Verify reads the rollout's output text (every assistant `output_text`, joined,
stripped) and extracts one letter:

1. `template_metadata.output_regex` (a pattern or a list), if the row has one: the last
   match of the first pattern that yields a letter or an option's exact text.
2. Otherwise the grading mode: the `grading_mode` setting if set, else the row's
   `grading_mode`, else `strict_single_letter_boxed`:
   - `strict_single_letter_boxed`: the letter in the **last** `\\boxed{}` ("E", "(E)",
     `\\text{E}`, "E: option text");
   - `lenient_boxed`: that, else the one option whose text is inside the last box;
   - `lenient_answer_colon`: "Answer: X", or "Answer: <an option's exact text>";
   - `lenient_answer_colon_md`: the last markdown-aware "**Answer:** X" that names exactly
     one letter (a list of letters names none). Text is read as written: no Unicode
     normalisation, no other answer prefix and no boxed fallback, as in NeMo Gym.

Only letters that are keys of the row's `options` count (except from the row's own regex).
`reward` is 1.0 iff the letter equals `expected_answer` (trimmed, upper-cased), else 0.0.
The result reports `expected_answer` and `extracted_answer` (`null` when none was found).

Bad input never raises: a row without a string `expected_answer`, malformed `options` or
`template_metadata`, or an unknown grading mode gets reward 0.0 and an `error_type`.

Metrics (as NeMo Gym's mcqa): `pass@{k}`, `pass@1[avg-of-{k}]` and `majority@{k}` of
`accuracy` (= reward) and `no_answer`, in percent, over each task's rollouts.

Settings (`GYMBUS_MCQA`, see `_settings`): `grading_mode` overrides every row's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

import msgspec
from msgspec import UNSET, Struct, UnsetType

from gymbus.schemas import VerifyRequest, VerifyResult, output_text

from .._spec import Environment, Session, TaskMetrics
from . import _mcqa_parse as parse
from ._pass_k import Scored, answer_digest, field_value, highest_k, pass_majority, per_task_summary
from ._settings import settings

__all__ = ["ENVIRONMENT", "McqaRequest", "McqaResult", "McqaSettings", "grade", "verify"]

NAME = "mcqa"
GradingMode = Literal[
    "strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md"
]
GRADING_MODES: tuple[str, ...] = get_args(GradingMode)


class McqaSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    grading_mode: GradingMode | None = None
    """Overrides the rows' `grading_mode` when set (NeMo Gym's server `grading_mode`)."""


class McqaRequest(VerifyRequest, kw_only=True):
    """The row fields mcqa reads. They are typed loosely so a malformed row is graded 0 with
    a reason instead of being refused."""

    options: Any = None
    expected_answer: Any = None
    grading_mode: Any = None
    template_metadata: Any = None


class McqaResult(VerifyResult, kw_only=True):
    expected_answer: str
    extracted_answer: str | None
    error_type: str | UnsetType = UNSET


class _BadRow(Exception):
    """A row mcqa cannot grade; `args[0]` is its `error_type`."""


def _options(value: Any) -> parse.Options | None:
    if value is None:
        return None
    try:
        return msgspec.convert(value, parse.Options)
    except msgspec.ValidationError:
        raise _BadRow("invalid_options") from None


def _output_regex(template: Any) -> str | list[str] | None:
    if template is None:
        return None
    if not isinstance(template, dict):
        raise _BadRow("invalid_template_metadata")
    patterns = template.get("output_regex")
    if patterns is None or isinstance(patterns, str):
        return patterns
    if isinstance(patterns, list) and all(isinstance(one, str) for one in patterns):
        return list(patterns)
    raise _BadRow("invalid_template_metadata")


def _grading_mode(request: McqaRequest, setting: str | None) -> str:
    mode = setting or request.grading_mode or "strict_single_letter_boxed"
    if mode not in GRADING_MODES:
        raise _BadRow("unknown_grading_mode")
    return str(mode)


def _by_mode(mode: str, text: str, options: parse.Options | None) -> str | None:
    allowed = parse.allowed_letters(options)
    if mode == "strict_single_letter_boxed":
        return parse.strict_boxed(text, allowed)
    if mode == "lenient_boxed":
        return parse.lenient_boxed(text, options, allowed)
    if mode == "lenient_answer_colon":
        return parse.answer_colon(text, options, allowed)
    return parse.answer_colon_md(text, allowed)


def extract_letter(request: McqaRequest, text: str, setting: str | None = None) -> str | None:
    """The letter `text` names for this row: its `output_regex` first, then its grading mode."""
    options = _options(request.options)
    patterns = _output_regex(request.template_metadata)
    mode = _grading_mode(request, setting)
    letter = None
    if patterns:
        letter = parse.custom_regexes(text, patterns, options, parse.allowed_letters(options))
    return letter if letter is not None else _by_mode(mode, text, options)


def grade(request: McqaRequest, mode: str | None = None) -> McqaResult:
    """The verify result of one rollout; `mode` overrides the row's grading mode."""
    expected = request.expected_answer
    gold = expected.strip().upper() if isinstance(expected, str) else ""
    if not gold:
        kind = "invalid_expected_answer" if expected is not None and not isinstance(expected, str) else None
        kind = kind or "missing_expected_answer"
        return McqaResult(reward=0.0, expected_answer=gold, extracted_answer=None, error_type=kind)
    text = output_text(request.response).strip()
    if not text:
        return McqaResult(
            reward=0.0, expected_answer=gold, extracted_answer=None, error_type="empty_response"
        )
    try:
        letter = extract_letter(request, text, mode)
    except _BadRow as bad:
        return McqaResult(reward=0.0, expected_answer=gold, extracted_answer=None, error_type=str(bad))
    return McqaResult(reward=float(letter == gold), expected_answer=gold, extracted_answer=letter)


async def verify(request: McqaRequest, session: Session) -> McqaResult:
    """Grade the rollout (see the module docstring)."""
    return grade(request, settings(McqaSettings, NAME).grading_mode)


def _project(fields: Mapping[str, msgspec.Raw]) -> Scored:
    reward = field_value(fields, "reward")
    return Scored({"accuracy": float(reward or 0.0)}, answer_digest(field_value(fields, "extracted_answer")))


def _compute(tasks: list[list[Scored]]) -> dict[str, Any]:
    return pass_majority(tasks)


def _key_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """NeMo Gym's mcqa headline: mean reward, then the highest-k accuracies and no-answer rates."""
    key: dict[str, Any] = {name: metrics[name] for name in ("mean/reward",) if name in metrics}
    key.update(highest_k(metrics, "pass@1[avg-of-{k}]", only=("accuracy", "no_answer")))
    key.update(highest_k(metrics, "pass@{k}", only=("no_answer",)))
    key.update(highest_k(metrics, "majority@{k}", only=("accuracy",)))
    if "pass@1/accuracy" in metrics:
        key["pass@1/accuracy"] = metrics["pass@1/accuracy"]
    return key


ENVIRONMENT = Environment(
    name=NAME,
    settings=McqaSettings,
    verify=verify,
    verify_request=McqaRequest,
    agents=("mcqa_simple_agent",),
    description="Multiple-choice questions graded by the extracted letter (NeMo Gym's mcqa).",
    metrics=TaskMetrics(
        project=_project, compute=_compute, per_task=per_task_summary, key_metrics=_key_metrics
    ),
)
