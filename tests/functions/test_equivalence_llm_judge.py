"""`equivalence_llm_judge`: the judge's first label decides, with the swap and rescue passes.
NeMo Gym's own cases, with its rewards, are pinned in `nemo_gym_cases/equivalence_llm_judge.py`."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gymbus.functions.environments.equivalence_llm_judge import (
    JUDGE_PROMPT,
    JudgeRequest,
    JudgeResult,
    JudgeSettings,
    grade,
    verify,
)
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import BadRequest, FunctionFailed
from tests.functions.verifier_rows import ScriptedJudge, example_rows, response, verify_request

DEFAULT = JudgeSettings()
CODE_DEFAULTS = JudgeSettings(  # NeMo Gym's class defaults, which its shipped config turns off
    extraction_length_threshold=120,
    check_full_generation_on_fail=True,
    reward_if_full_generation_succeeds=0.5,
)
QUESTION = "Answer the following question. Put the final answer inside \\boxed{}.\n\nWho proposed evolution?"
OPENQA = {"template_metadata": {"output_regex": r"Final answer:\s*(.+)"}}


async def judged(
    text: str | tuple[str, ...], judge: ScriptedJudge, config: JudgeSettings = DEFAULT, **row: Any
) -> JudgeResult:
    fields = {"expected_answer": "darwin", **row}
    return await grade(verify_request(JudgeRequest, text, QUESTION, **fields), judge.session(), config)


def replies(*verdicts: str) -> ScriptedJudge:
    queue = list(verdicts)
    return ScriptedJudge(lambda _: queue.pop(0))


async def test_judged_equal_earns_one() -> None:
    judge = ScriptedJudge("Same person. [[A=B]]")
    result = await judged("\\boxed{Charles Darwin}", judge)
    assert (result.reward, result.expected_answer) == (1.0, "darwin")
    [evaluation] = result.judge_evaluations
    assert evaluation.verdict_label == "[[A=B]]"
    [prompt] = judge.prompts()
    assert QUESTION in prompt and "darwin" in prompt and "\\boxed{Charles Darwin}" in prompt
    assert [model for model, _ in judge.calls] == ["policy"]  # the policy judges by default


@pytest.mark.parametrize(
    ("verdict", "label", "reward"),
    [
        ("[[A!=B]]", "[[A!=B]]", 0.0),
        ("[[A!=B]] even if one might say [[A=B]]", "[[A!=B]]", 0.0),  # the first label wins
        ("[[A=B]], not [[A!=B]]", "[[A=B]]", 1.0),
        ("I cannot decide.", None, 0.0),  # no label: not equal
    ],
)
async def test_the_first_label_in_the_judges_text_decides(
    verdict: str, label: str | None, reward: float
) -> None:
    result = await judged("\\boxed{Lamarck}", ScriptedJudge(verdict))
    assert (result.reward, result.judge_evaluations[0].verdict_label) == (reward, label)


async def test_the_default_prompt_is_nemo_gyms_configured_template() -> None:
    filled = JUDGE_PROMPT.format(question="Q", expected_answer="E", generated_answer="G")
    assert filled.startswith("===== System role =====\nYou are a meticulous STEM grader.")
    assert filled.endswith("===== Inputs =====\nQUESTION:\nQ\n\nGOLD:\nE\n\nCANDIDATE:\nG")
    assert "[[A=B]] they are equivalent" in filled and "[[A!=B]] they are not equivalent" in filled
    judge = ScriptedJudge("[[A=B]]")
    await judged("Charles Darwin", judge)
    [(_, params)] = judge.calls  # one user message, no system message (NeMo Gym's `null`)
    assert isinstance(params.input, list) and [item.role for item in params.input] == ["user"]
    assert judge.prompts() == [
        JUDGE_PROMPT.format(question=QUESTION, expected_answer="darwin", generated_answer="Charles Darwin")
    ]


def test_the_defaults_are_nemo_gyms_shipped_config() -> None:
    assert DEFAULT.judge_prompt_template_fpath == "prompt_templates/equivalence_llm_judge.txt"
    assert DEFAULT.extraction_length_threshold is None
    assert DEFAULT.check_full_generation_on_fail is False
    assert DEFAULT.reward_if_full_generation_succeeds == 0.0
    assert DEFAULT.judge_endpoint_max_concurrency == 64
    assert (DEFAULT.check_twice_swap, DEFAULT.reward_if_swap_fails, DEFAULT.use_per_record_regex) == (
        False,
        0.0,
        True,
    )


async def test_swap_check_asks_again_with_the_answers_swapped() -> None:
    config = JudgeSettings(check_twice_swap=True, reward_if_swap_fails=-1.0)
    agree = replies("[[A=B]]", "[[A=B]]")
    assert (await judged("\\boxed{Darwin}", agree, config)).reward == 1.0
    first, second = agree.prompts()
    assert first.index("darwin") < first.index("\\boxed{Darwin}")
    assert second.index("\\boxed{Darwin}") < second.index("darwin")
    disagree = replies("[[A=B]]", "[[A!=B]]")
    assert (await judged("\\boxed{Darwin}", disagree, config)).reward == -1.0
    no_swap_when_wrong = replies("[[A!=B]]")
    assert (await judged("\\boxed{Darwin}", no_swap_when_wrong, config)).reward == 0.0


async def test_a_per_record_regex_cuts_the_answer_and_a_failure_is_rescued_at_half() -> None:
    text = "Reasoning about finches...\nFinal answer: Wallace"
    judge = replies("[[A!=B]]", "[[A=B]]")
    result = await judged(text, judge, CODE_DEFAULTS, **OPENQA)
    first, second = judge.prompts()
    assert first.endswith("CANDIDATE:\nWallace")  # the regex's group
    assert "Reasoning about finches" in second  # the rescue judges the whole answer
    assert (result.reward, len(result.judge_evaluations)) == (0.5, 2)


async def test_no_rescue_without_a_per_record_regex_or_when_it_is_off() -> None:
    assert (await judged("Final answer: Wallace", replies("[[A!=B]]"), CODE_DEFAULTS)).reward == 0.0
    judge = replies("[[A!=B]]")
    assert (await judged("Final answer: Wallace", judge, DEFAULT, **OPENQA)).reward == 0.0
    assert len(judge.calls) == 1
    per_record_off = JudgeSettings(use_per_record_regex=False)
    judge = replies("[[A!=B]]")
    await judged("Because...\nFinal answer: Wallace", judge, per_record_off, **OPENQA)
    assert "Because..." in judge.prompts()[0]


async def test_a_long_expected_answer_is_judged_against_the_whole_answer_once() -> None:
    long_expected = "x" * 121
    judge = replies("[[A!=B]]")
    row = {"expected_answer": long_expected, **OPENQA}
    result = await judged("Because...\nFinal answer: y", judge, CODE_DEFAULTS, **row)
    assert "Because..." in judge.prompts()[0] and result.reward == 0.0 and len(judge.calls) == 1


async def test_the_configured_regexes_cut_question_and_answer() -> None:
    config = JudgeSettings(question_extract_regex=r"\n\n(.+)$", response_extract_regex=r"\\boxed\{(.*)\}")
    judge = ScriptedJudge("[[A=B]]")
    await judged("I think \\boxed{Darwin}", judge, config)
    [prompt] = judge.prompts()
    assert "QUESTION:\nWho proposed evolution?\n" in prompt and prompt.endswith("CANDIDATE:\nDarwin")


async def test_only_the_last_assistant_message_is_judged() -> None:
    judge = ScriptedJudge("[[A=B]]")
    await judged(("an early draft", "the final word"), judge)
    assert "early draft" not in judge.prompts()[0] and "the final word" in judge.prompts()[0]


async def test_no_answer_text_is_judged_as_the_extraction_failure_message() -> None:
    judge = ScriptedJudge("[[A!=B]]")
    assert (await judged((), judge)).reward == 0.0
    assert judge.prompts()[0].endswith("[NO VALID ANSWER EXTRACTED]")


async def test_the_expected_answer_may_come_from_metadata() -> None:
    judge = ScriptedJudge("[[A=B]]")
    result = await judged(
        "\\boxed{Darwin}", judge, expected_answer=None, metadata={"expected_answer": "darwin"}
    )
    assert (result.reward, result.expected_answer) == (1.0, "darwin")


@pytest.mark.parametrize(
    ("row", "error_type"),
    [
        ({"expected_answer": None}, "missing_expected_answer"),
        ({"expected_answer": 7}, "invalid_expected_answer"),
        ({"template_metadata": {"output_regex": ["a", "b"]}}, "invalid_template_metadata"),
    ],
)
async def test_a_malformed_row_scores_zero_without_asking_the_judge(
    row: dict[str, Any], error_type: str
) -> None:
    judge = ScriptedJudge("[[A=B]]")
    result = await judged("\\boxed{Darwin}", judge, **row)
    assert (result.reward, result.error_type, judge.calls) == (0.0, error_type, [])


async def test_a_custom_template_that_does_not_format_is_a_bad_request() -> None:
    config = JudgeSettings(judge_prompt_template="{question} {unknown}")
    with pytest.raises(BadRequest, match="template"):
        await judged("\\boxed{Darwin}", ScriptedJudge(), config)


async def test_a_template_file_and_a_system_message(tmp_path: Any) -> None:
    template = tmp_path / "judge.txt"
    template.write_text("Q={question} E={expected_answer} G={generated_answer}\n")
    config = JudgeSettings(judge_prompt_template_fpath=str(template), judge_system_message="Be strict.")
    judge = ScriptedJudge("[[A=B]]")
    await judged("Darwin", judge, config)
    [(_, params)] = judge.calls
    assert isinstance(params.input, list) and params.input[0].content == "Be strict."
    assert judge.prompts() == [f"Q={QUESTION} E=darwin G=Darwin"]


async def test_nemo_gyms_template_path_names_the_built_in_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    setting = '{"judge_prompt_template_fpath": "prompt_templates/equivalence_llm_judge.txt"}'
    monkeypatch.setenv("GYMBUS_EQUIVALENCE_LLM_JUDGE", setting)  # as in NeMo Gym's shipped config
    judge = ScriptedJudge("[[A=B]]")
    await verify(verify_request(JudgeRequest, "Darwin", QUESTION, expected_answer="darwin"), judge.session())
    assert judge.prompts() == [
        JUDGE_PROMPT.format(question=QUESTION, expected_answer="darwin", generated_answer="Darwin")
    ]
    monkeypatch.setenv("GYMBUS_EQUIVALENCE_LLM_JUDGE", '{"judge_prompt_template_fpath": "nowhere/judge.txt"}')
    with pytest.raises(BadRequest, match="cannot read judge_prompt_template_fpath 'nowhere/judge.txt'"):
        await verify(
            verify_request(JudgeRequest, "Darwin", QUESTION, expected_answer="darwin"), judge.session()
        )


async def test_a_judge_outage_is_a_judge_failed_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    setting = '{"judge_model_server": {"type": "responses_api_models", "name": "judge"}}'
    monkeypatch.setenv("GYMBUS_EQUIVALENCE_LLM_JUDGE", setting)
    judge = ScriptedJudge(error=FunctionFailed("the judge endpoint answered 500"))
    request = verify_request(JudgeRequest, "\\boxed{Darwin}", QUESTION, expected_answer="darwin")
    reply = json.loads(msgspec.json.encode(await verify(request, judge.session())))
    assert reply["_ng_failure_class"] == "judge_failed" and reply["reward"] == 0.0
    assert "answered 500" in reply["_ng_failure_judge_error"]
    assert [model for model, _ in judge.calls] == ["judge"]


async def test_reference_rows_are_judged() -> None:
    row = example_rows("equivalence_llm_judge")[4]  # expected "the sun"
    request = msgspec.convert({**row, "response": response("\\boxed{The Sun}")}, JudgeRequest)
    judge = ScriptedJudge("[[A=B]]")
    assert (await grade(request, judge.session(), DEFAULT)).reward == 1.0
    assert "Surface waters are heated" in judge.prompts()[0]


async def test_a_string_input_gives_an_empty_question_as_in_nemo_gym() -> None:
    request = msgspec.convert(
        {
            "responses_create_params": {"input": "Who?"},
            "response": response("Darwin"),
            "expected_answer": "d",
        },
        JudgeRequest,
    )
    judge = ScriptedJudge("[[A!=B]]")
    await grade(request, judge.session(), DEFAULT)
    assert "QUESTION:\n\n\nGOLD:" in judge.prompts()[0]


async def test_judge_calls_at_once_are_bounded_by_the_setting() -> None:
    import asyncio

    running, peak = 0, 0

    class SlowJudge(ScriptedJudge):
        async def generate(self, model: str, params: Any) -> Any:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1
            return await super().generate(model, params)

    judge = SlowJudge("[[A=B]]")
    config = JudgeSettings(judge_endpoint_max_concurrency=2)
    await asyncio.gather(*(judged("Darwin", judge, config) for _ in range(6)))
    assert (peak, len(judge.calls)) == (2, 6)


def test_equivalence_llm_judge_serves_the_agent_name_datasets_use() -> None:
    assert ENVIRONMENTS["equivalence_llm_judge"].agents == ("equivalence_llm_judge_simple_agent",)
