"""`equivalence_llm_judge`: a judge model decides whether the answer matches the expected one
(NeMo Gym's `equivalence_llm_judge`).

No tools. Verify fills the judge prompt's `{question}` (the last user message of the prompt's
input list, its text parts joined by newlines, optionally cut by `question_extract_regex`),
`{expected_answer}` (the row's, else `metadata.expected_answer`) and `{generated_answer}` (the
last assistant message, its text parts joined by newlines, optionally cut by a regex: the
last match, its first non-empty group), and asks the judge model. The first of
`judge_equal_label` (`[[A=B]]`) / `judge_not_equal_label` (`[[A!=B]]`) in the judge's text
decides; neither reads as not equal. The default prompt is NeMo Gym's configured template
(`judge_prompts/equivalence_llm_judge.txt`), so a real judge sees what it would see there.

- Judged equal: reward 1.0; with `check_twice_swap`, the judge is asked again with the two
  answers swapped and the reward is 1.0 only if it agrees, else `reward_if_swap_fails` (0.0).
- Judged not equal: reward 0.0; but if the row's own regex was used
  (`template_metadata.output_regex`, with `use_per_record_regex`) and
  `check_full_generation_on_fail`, the judge is asked again with the whole answer, and
  agreement earns `reward_if_full_generation_succeeds`.
- A per-record regex is not applied (the whole answer is judged, and neither second pass
  runs) when the expected answer is longer than `extraction_length_threshold`.

A judge that fails makes the rollout a `judge_failed` failure (see `_judge`). The result
reports `expected_answer` and `judge_evaluations` (each with its `verdict_label`). A row
without a string expected answer gets reward 0.0 and an `error_type` without asking the judge.

Settings (`GYMBUS_EQUIVALENCE_LLM_JUDGE`, see `_settings`) have NeMo Gym's names and the values
of its shipped `configs/equivalence_llm_judge.yaml`: `judge_model_server` (`policy_model`, the
policy), `judge_responses_create_params`, `judge_endpoint_max_concurrency` (64 judge calls at
once per worker; `null` for no limit), `judge_system_message` (none),
`judge_prompt_template_fpath` (NeMo Gym's `prompt_templates/equivalence_llm_judge.txt`,
which names the built-in copy unless such a file exists), the two labels,
`question_extract_regex`, `response_extract_regex`, `msg_extraction_failure`,
`check_twice_swap` (false), `reward_if_swap_fails` (0.0), `use_per_record_regex` (true),
`extraction_length_threshold` (null), `check_full_generation_on_fail` (false) and
`reward_if_full_generation_succeeds` (0.0). `judge_prompt_template` (the text itself, which
wins over the file) is GymBus's own, for a template without a file.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from gymbus.schemas import BadRequest, Item, VerifyRequest, VerifyResult

from .._spec import Environment, Session
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
from ._settings import settings

__all__ = ["ENVIRONMENT", "JUDGE_PROMPT", "JudgeRequest", "JudgeResult", "JudgeSettings", "grade", "verify"]

NAME = "equivalence_llm_judge"

JUDGE_PROMPT = judge_prompt("equivalence_llm_judge")
"""The default judge prompt: NeMo Gym's configured template (`{question}`, `{expected_answer}`,
`{generated_answer}`)."""


NEMO_GYM_TEMPLATE_FPATH = "prompt_templates/equivalence_llm_judge.txt"
"""NeMo Gym's default `judge_prompt_template_fpath`: here, the built-in copy of that file."""


class JudgeSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    judge_model_server: str | ModelServerRef = msgspec.field(default_factory=lambda: POLICY_MODEL)
    judge_responses_create_params: dict[str, Any] = msgspec.field(default_factory=dict)
    judge_endpoint_max_concurrency: Annotated[int, Meta(gt=0)] | None = 64
    judge_system_message: str | None = None
    judge_prompt_template: str | None = None
    judge_prompt_template_fpath: str = NEMO_GYM_TEMPLATE_FPATH
    judge_equal_label: str = "[[A=B]]"
    judge_not_equal_label: str = "[[A!=B]]"
    question_extract_regex: str | None = None
    response_extract_regex: str | None = None
    msg_extraction_failure: str = "[NO VALID ANSWER EXTRACTED]"
    check_twice_swap: bool = False
    reward_if_swap_fails: float = 0.0
    use_per_record_regex: bool = True
    extraction_length_threshold: int | None = None
    check_full_generation_on_fail: bool = False
    reward_if_full_generation_succeeds: float = 0.0


class JudgeRequest(VerifyRequest, kw_only=True):
    """The row fields read; loosely typed so a malformed row is graded 0 with a reason."""

    expected_answer: Any = None
    metadata: Any = None
    template_metadata: Any = None


class JudgeResult(VerifyResult, kw_only=True):
    expected_answer: str
    judge_evaluations: list[JudgeEvaluation]
    error_type: str | UnsetType = UNSET


class _BadRow(Exception):
    """A row that cannot be judged; `args[0]` is its `error_type`."""


@cache
def _template_file(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise BadRequest(f"cannot read judge_prompt_template_fpath {path!r}: {exc.strerror}") from None


def _template(config: JudgeSettings) -> str:
    if config.judge_prompt_template:
        return config.judge_prompt_template
    path = config.judge_prompt_template_fpath
    if path == NEMO_GYM_TEMPLATE_FPATH and not Path(path).is_file():
        return JUDGE_PROMPT
    return _template_file(path)


def _last_match(pattern: str | None, text: str) -> str | None:
    """The last match of `pattern` in `text`: its first non-empty group, else the whole match
    (both stripped); `None` when there is no pattern, no match or the pattern is bad (as in
    NeMo Gym, which then keeps the whole text)."""
    if not pattern:
        return None
    try:
        matches = list(re.finditer(pattern, text, flags=re.MULTILINE | re.DOTALL))
    except re.error:
        return None
    if not matches:
        return None
    last = matches[-1]
    group = next((g.strip() for g in last.groups() if isinstance(g, str) and g.strip()), None)
    return group if group is not None else last.group(0).strip()


def _cut(pattern: str | None, text: str) -> str:
    found = _last_match(pattern, text)
    return text if found is None else found


def _expected(request: JudgeRequest) -> str:
    value = request.expected_answer
    if not value and isinstance(request.metadata, dict):
        value = request.metadata.get("expected_answer")
    if value is None or value == "":
        raise _BadRow("missing_expected_answer")
    if not isinstance(value, str):
        raise _BadRow("invalid_expected_answer")
    return value


def _record_regex(request: JudgeRequest, config: JudgeSettings) -> str | None:
    """The row's `template_metadata.output_regex`, when per-record regexes are on."""
    template = request.template_metadata
    if not config.use_per_record_regex or not isinstance(template, dict):
        return None
    pattern = template.get("output_regex")
    if pattern is not None and not isinstance(pattern, str):
        raise _BadRow("invalid_template_metadata")
    return pattern or None


def _too_long(expected: str, config: JudgeSettings) -> bool:
    limit = config.extraction_length_threshold
    return limit is not None and len(expected) > limit


def _question(request: JudgeRequest, config: JudgeSettings) -> str:
    """The last user message's text. Like NeMo Gym, only an input *list* is read (a string
    input gives an empty question), and a user message without text parts is skipped."""
    params_input = request.responses_create_params.input
    text = ""
    for item in params_input if isinstance(params_input, list) else []:
        if item.role == "user" and (content := _message_text(item)) is not None:
            text = content
    text = text.strip()
    return _cut(config.question_extract_regex, text) if text else text


def _message_text(item: Item) -> str | None:
    """A message's string content, or its text parts joined by newlines (`None` if none)."""
    if isinstance(item.content, str):
        return item.content
    texts = [
        t for t in map(_part_text, item.content if isinstance(item.content, list) else []) if t is not None
    ]
    return "\n".join(texts) if texts else None


def _generated(request: JudgeRequest, pattern: str | None, config: JudgeSettings) -> str:
    """The last assistant message's text (parts joined by newlines), cut by `pattern`."""
    for item in reversed(request.response.output):
        if item.kind == "message" and item.role == "assistant":
            if not isinstance(item.content, list | str):
                break
            text = (_message_text(item) or "").strip()
            return _cut(pattern, text) if text else config.msg_extraction_failure
    return config.msg_extraction_failure


def _part_text(part: Any) -> str | None:
    text = part if isinstance(part, str) else getattr(part, "text", None)
    return text if isinstance(text, str) else None


class _Judge:
    """The judge calls of one verify."""

    def __init__(self, session: Session, config: JudgeSettings, question: str, expected: str) -> None:
        self.session, self.config, self.question, self.expected = session, config, question, expected
        self.evaluations: list[JudgeEvaluation] = []

    async def equal(self, expected: str, generated: str) -> bool:
        config = self.config
        try:
            prompt = _template(config).format(
                question=self.question, expected_answer=expected, generated_answer=generated
            )
        except (KeyError, IndexError, ValueError) as exc:
            raise BadRequest(f"the judge prompt template does not format: {exc!r}") from None
        params = judge_params(config.judge_responses_create_params, config.judge_system_message, prompt)
        response = await ask_judge(
            self.session,
            judge_model(config.judge_model_server),
            params,
            config.judge_endpoint_max_concurrency,
        )
        label = first_label(judge_text(response), config.judge_equal_label, config.judge_not_equal_label)
        self.evaluations.append(
            JudgeEvaluation(responses_create_params=params, response=response, verdict_label=label)
        )
        return label == config.judge_equal_label


async def _reward(judge: _Judge, request: JudgeRequest, config: JudgeSettings) -> float:
    expected, pattern = judge.expected, _record_regex(request, config)
    skip_second = pattern is not None and _too_long(expected, config)
    generated = _generated(request, None if skip_second else pattern or config.response_extract_regex, config)
    if await judge.equal(expected, generated):
        if not config.check_twice_swap or skip_second:
            return 1.0
        return 1.0 if await judge.equal(generated, expected) else config.reward_if_swap_fails
    if pattern is None or skip_second or not config.check_full_generation_on_fail:
        return 0.0
    whole = _generated(request, None, config)
    return config.reward_if_full_generation_succeeds if await judge.equal(expected, whole) else 0.0


async def grade(request: JudgeRequest, session: Session, config: JudgeSettings) -> JudgeResult:
    """The verify result of one rollout under `config` (see the module docstring)."""
    try:
        expected = _expected(request)
        _record_regex(request, config)
    except _BadRow as bad:
        return JudgeResult(reward=0.0, expected_answer="", judge_evaluations=[], error_type=str(bad))
    judge = _Judge(session, config, _question(request, config), expected)
    reward = await _reward(judge, request, config)
    return JudgeResult(reward=reward, expected_answer=expected, judge_evaluations=judge.evaluations)


async def verify(request: JudgeRequest, session: Session) -> JudgeResult | JudgeFailed:
    """Judge the rollout; a failed judge makes it a `judge_failed` failure row."""
    try:
        return await grade(request, session, settings(JudgeSettings, NAME))
    except JudgeUnavailable as exc:
        return judge_failed(exc)


ENVIRONMENT = Environment(
    name=NAME,
    settings=JudgeSettings,
    verify=verify,
    verify_request=JudgeRequest,
    agents=("equivalence_llm_judge_simple_agent",),
    description="An LLM judge compares the answer with the expected one (NeMo Gym's equivalence_llm_judge).",
)
