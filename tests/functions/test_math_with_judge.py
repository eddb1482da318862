"""`math_with_judge`: math-verify in a child process, then (optionally) a judge in both orders.
NeMo Gym's own cases, with its rewards, are pinned in `nemo_gym_cases/math_with_judge.py`."""

from __future__ import annotations

import json
import multiprocessing
import time
from typing import Any

import msgspec
import pytest

from gymbus.functions import Session
from gymbus.functions.environments import _math_library
from gymbus.functions.environments._judge import ModelServerRef
from gymbus.functions.environments.math_with_judge import (
    JUDGE_PROMPT,
    JUDGE_SYSTEM,
    MathRequest,
    MathResult,
    MathSettings,
    grade,
    verify,
)
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import BadRequest, DeadlineExceeded, NoResponders, RequestTimeout, row_fields
from tests.functions.verifier_rows import ScriptedJudge, example_rows, response, verify_request

NO_JUDGE = MathSettings()
WITH_JUDGE = MathSettings(should_use_judge=True, judge_model_server=ModelServerRef(name="judge"))


async def graded(
    text: str | tuple[str, ...], expected: Any = "32", config: MathSettings = NO_JUDGE, judge: Any = None
) -> MathResult:
    request = verify_request(MathRequest, text, question="How many?", expected_answer=expected)
    session = judge.session() if judge is not None else Session(id="s")
    return await grade(request, session, config)


async def test_the_right_boxed_answer_earns_one() -> None:
    result = await graded("The count is \\boxed{32}.")
    assert (result.reward, result.library_reward, result.extracted_answer) == (1.0, 1.0, "32")
    assert result.judge_evaluations is None


async def test_a_wrong_answer_earns_zero() -> None:
    result = await graded("\\boxed{31}")
    assert (result.reward, result.library_reward, result.extracted_answer) == (0.0, 0.0, "31")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{2^{1/2}}", "\\(\\sqrt{2}\\)"),  # equivalent forms; \( \) stripped from the gold
        ("so $x = \\boxed{-3}$", "$-3$"),
        ("\\boxed{\\frac{333}{1997}}", "\\(\\frac{333}{1997}\\)"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
    ],
)
async def test_math_verify_accepts_equivalent_answers(text: str, expected: str) -> None:
    assert (await graded(text, expected)).reward == 1.0


@pytest.mark.parametrize(
    ("text", "reward", "extracted"),
    [
        ("The answer is 32.", 1.0, "32"),  # no box needed: math-verify reads the plain answer
        ("32", 1.0, "32"),
        ("\\boxed{ }", 0.0, None),
        ("\\boxed{32", 0.0, None),  # a box never closed: nothing math-verify can read
        ("The count is thirty-two.", 0.0, None),
    ],
)
async def test_math_verify_reads_the_whole_response_boxed_or_not(
    text: str, reward: float, extracted: str | None
) -> None:
    result = await graded(text)
    assert (result.reward, result.library_reward, result.extracted_answer) == (reward, reward, extracted)
    assert result.error_type is msgspec.UNSET


async def test_a_response_without_text_scores_zero_with_a_reason() -> None:
    result = await graded(())
    assert (result.reward, result.error_type) == (0.0, "empty_response")


@pytest.mark.parametrize(
    ("expected", "error_type"),
    [(None, "missing_expected_answer"), ("  ", "missing_expected_answer"), (32, "invalid_expected_answer")],
)
async def test_a_row_without_a_string_expected_answer_scores_zero(expected: Any, error_type: str) -> None:
    result = await graded("\\boxed{32}", expected)
    assert (result.reward, result.error_type) == (0.0, error_type)


async def test_reference_row() -> None:
    row = example_rows("math_with_judge")[3]  # expected \(\sqrt{2}\)
    right = msgspec.convert({**row, "response": response("AP = \\boxed{\\sqrt{2}}")}, MathRequest)
    wrong = msgspec.convert({**row, "response": response("AP = \\boxed{\\sqrt{3}}")}, MathRequest)
    assert (await grade(right, Session(id="s"), NO_JUDGE)).reward == 1.0
    assert (await grade(wrong, Session(id="s"), NO_JUDGE)).reward == 0.0


def _hang(expected: str, generated: str) -> tuple[float, str | None]:
    time.sleep(60)
    return 1.0, "never"


def _crash(expected: str, generated: str) -> tuple[float, str | None]:
    raise SystemExit(3)


@pytest.mark.parametrize("check", [_hang, _crash])
async def test_a_hung_or_crashed_check_scores_zero_and_leaves_no_process(
    monkeypatch: pytest.MonkeyPatch, check: Any
) -> None:
    monkeypatch.setattr(_math_library, "_check", check)  # the forked child runs it
    assert await _math_library.library_check("1", "\\boxed{1}", timeout=0.5) == (0.0, None)
    assert multiprocessing.active_children() == []


async def test_judge_is_off_by_default_and_asked_only_when_the_library_says_no() -> None:
    judge = ScriptedJudge("[[A=B]]")
    assert (await graded("\\boxed{31}", judge=judge)).reward == 0.0
    assert (await graded("\\boxed{32}", config=WITH_JUDGE, judge=judge)).reward == 1.0
    assert judge.calls == []


async def test_judge_equal_in_both_orders_earns_one() -> None:
    judge = ScriptedJudge("They match. [[A=B]]")
    result = await graded("thirty-two", config=WITH_JUDGE, judge=judge)
    assert (result.reward, result.library_reward, result.extracted_answer) == (1.0, 0.0, None)
    assert [model for model, _ in judge.calls] == ["judge", "judge"]
    first, second = judge.prompts()
    assert first == JUDGE_PROMPT.format(question="How many?", first_answer="32", second_answer="thirty-two")
    assert second == JUDGE_PROMPT.format(question="How many?", first_answer="thirty-two", second_answer="32")
    assert result.judge_evaluations is not None and len(result.judge_evaluations) == 2


async def test_the_judge_sees_nemo_gyms_system_message_and_prompt() -> None:
    judge = ScriptedJudge("[[A!=B]]")
    await graded("thirty-two", config=WITH_JUDGE, judge=judge)
    [(_, params)] = judge.calls
    assert isinstance(params.input, list) and [item.role for item in params.input] == ["system", "user"]
    assert params.input[0].content == JUDGE_SYSTEM
    assert JUDGE_SYSTEM.startswith("Please act as an impartial judge and evaluate the equivalence")
    assert JUDGE_PROMPT.startswith("<|Problem|>\n{question}\n\n<|Start of Assistant A's Answer|>")


@pytest.mark.parametrize(
    ("replies", "calls"),
    [
        (["[[A!=B]]"], 1),  # first order says no: no second call
        (["[[A=B]]", "[[A!=B]]"], 2),  # the orders disagree
        (["[[A!=B]] rather than [[A=B]]"], 1),  # the first label found wins
        (["They look the same to me."], 1),  # no label: not equal
    ],
)
async def test_anything_but_two_equal_verdicts_earns_zero(replies: list[str], calls: int) -> None:
    queue = list(replies)
    judge = ScriptedJudge(lambda _: queue.pop(0))
    result = await graded("thirty-two", config=WITH_JUDGE, judge=judge)
    assert result.reward == 0.0 and len(judge.calls) == calls


async def test_the_judge_sees_the_extracted_answer_else_the_whole_response() -> None:
    judge = ScriptedJudge("[[A!=B]]")
    extracted = await graded("Long working ... so \\boxed{31}", config=WITH_JUDGE, judge=judge)
    unreadable = await graded("Long working ... thirty-two", config=WITH_JUDGE, judge=judge)
    assert (extracted.extracted_answer, unreadable.extracted_answer) == ("31", None)
    first, second = judge.prompts()
    assert "Long working" not in first and "\n31\n" in first
    assert "\nLong working ... thirty-two\n" in second


async def test_an_empty_response_is_still_judged_as_nemo_gym_does() -> None:
    judge = ScriptedJudge("[[A!=B]]")
    result = await graded("", config=WITH_JUDGE, judge=judge)
    assert (result.reward, result.error_type, len(judge.calls)) == (0.0, "empty_response", 1)


async def test_library_checks_at_once_follow_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    async def check(expected: str, generated: str, timeout: float, max_children: int) -> tuple[float, None]:
        seen.append(max_children)
        return 0.0, None

    monkeypatch.setattr("gymbus.functions.environments.math_with_judge.library_check", check)
    await graded("32", config=MathSettings(library_verifier_max_concurrency=3))
    assert seen == [3]


@pytest.mark.parametrize("error", [NoResponders("nobody serves it"), RequestTimeout("slow judge")])
async def test_a_judge_outage_is_a_judge_failed_failure_not_a_wrong_answer(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    monkeypatch.setenv("GYMBUS_MATH_WITH_JUDGE", '{"should_use_judge": true}')
    judge = ScriptedJudge(error=error)
    request = verify_request(MathRequest, "\\boxed{31}", question="How many?", expected_answer="32")
    reply = json.loads(msgspec.json.encode(await verify(request, judge.session())))
    assert reply["_ng_failure_class"] == "judge_failed"
    assert type(error).__name__ in reply["_ng_failure_judge_error"]
    assert reply["reward"] == 0.0 and "library_reward" not in reply
    assert [model for model, _ in judge.calls] == ["policy"]  # the default judge model


async def test_a_passed_deadline_during_judging_stays_a_deadline() -> None:
    judge = ScriptedJudge(error=DeadlineExceeded("too late"))
    with pytest.raises(DeadlineExceeded):
        await graded("\\boxed{31}", config=WITH_JUDGE, judge=judge)


async def test_without_a_question_the_judge_sees_the_prompt() -> None:
    judge = ScriptedJudge("[[A!=B]]")
    request = verify_request(MathRequest, "\\boxed{31}", prompt="Solve: 30 + 2", expected_answer="32")
    await grade(request, judge.session(), WITH_JUDGE)
    assert "Solve: 30 + 2" in judge.prompts()[0]


def test_math_with_judge_serves_the_agent_name_datasets_use() -> None:
    env = ENVIRONMENTS["math_with_judge"]
    assert env.agents == ("math_with_judge_simple_agent",) and env.metrics is not None


def metrics_of(rows: list[list[dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = ENVIRONMENTS["math_with_judge"].metrics
    assert spec is not None and spec.key_metrics is not None
    tasks = [[spec.project(row_fields(json.dumps(row).encode())) for row in task] for task in rows]
    metrics = {"mean/input_tokens": 10.0, "mean/reward": 0.5, **spec.compute(tasks)}
    return metrics, spec.key_metrics(metrics)


def test_metrics_score_the_library_and_the_judge_separately() -> None:
    judged = [{"role": "judge"}]
    metrics, key = metrics_of(
        [
            [
                {"reward": 1.0, "library_reward": 1.0, "extracted_answer": "32", "judge_evaluations": None},
                {
                    "reward": 1.0,
                    "library_reward": 0.0,
                    "extracted_answer": "2^5",
                    "judge_evaluations": judged,
                },
            ],
            [
                {"reward": 0.0, "library_reward": 0.0, "extracted_answer": None, "judge_evaluations": None},
                {"reward": 0.0, "library_reward": 0.0, "extracted_answer": "7", "judge_evaluations": judged},
            ],
        ]
    )
    assert metrics["pass@1[avg-of-2]/symbolic_accuracy"] == pytest.approx(25.0)
    assert metrics["pass@2/symbolic_accuracy"] == pytest.approx(50.0)
    assert metrics["pass@1/judge_accuracy"] == pytest.approx(50.0)  # judged rollouts only
    assert "pass@2/judge_accuracy" not in metrics  # one judged rollout per task
    assert metrics["majority@2/symbolic_accuracy"] == pytest.approx(25.0)  # "32" ties "2^5"
    assert metrics["pass@1[avg-of-2]/no_answer"] == pytest.approx(25.0)
    assert key == {
        "mean/input_tokens": 10.0,
        "pass@1[avg-of-2]/judge_accuracy": pytest.approx(50.0),
        "pass@1[avg-of-2]/no_answer": pytest.approx(25.0),
        "pass@1[avg-of-2]/symbolic_accuracy": pytest.approx(25.0),
        "pass@2/symbolic_accuracy": pytest.approx(50.0),
        "majority@2/judge_accuracy": pytest.approx(50.0),
        "majority@2/symbolic_accuracy": pytest.approx(25.0),
    }


@pytest.mark.parametrize(
    ("setting", "model"),
    [
        ('{"type": "responses_api_models", "name": "judge"}', "judge"),  # NeMo Gym's server reference
        ('"judge"', "judge"),
        ('"policy_model"', "policy"),  # NeMo Gym's name for the policy
    ],
)
async def test_the_judge_is_named_as_in_nemo_gyms_config(
    monkeypatch: pytest.MonkeyPatch, setting: str, model: str
) -> None:
    monkeypatch.setenv(
        "GYMBUS_MATH_WITH_JUDGE", f'{{"should_use_judge": true, "judge_model_server": {setting}}}'
    )
    judge = ScriptedJudge("[[A!=B]]")
    await verify(verify_request(MathRequest, "31", question="Q", expected_answer="32"), judge.session())
    assert [name for name, _ in judge.calls] == [model]


async def test_a_setting_nemo_gym_does_not_have_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMBUS_MATH_WITH_JUDGE", '{"judge_model": "judge"}')
    with pytest.raises(BadRequest, match="judge_model"):
        await verify(verify_request(MathRequest, "32", expected_answer="32"), Session(id="s"))
