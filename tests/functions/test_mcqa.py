"""`mcqa` grades the letter an answer names, as NeMo Gym's mcqa does, in every grading mode."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gymbus.bus import environment_service
from gymbus.functions import MemoryState, Session
from gymbus.functions.environments.mcqa import McqaRequest, McqaResult, grade, verify
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import BadRequest, row_fields
from tests.functions.verifier_rows import example_rows, response, verify_request

OPTIONS = [{"A": "Karyotyping"}, {"B": "Polymerase Chain Reaction (PCR)"}, {"C": "Southern blotting"}]


def graded(
    text: str | tuple[str, ...], expected: Any = "B", mode: str | None = None, **row: Any
) -> McqaResult:
    fields = {"options": OPTIONS, "expected_answer": expected, **row}
    return grade(verify_request(McqaRequest, text, **fields), mode)


def letter(text: str, mode: str = "strict_single_letter_boxed", **row: Any) -> str | None:
    return graded(text, grading_mode=mode, **row).extracted_answer


def test_the_right_letter_earns_one() -> None:
    result = graded("Thinking... \\boxed{B}")
    assert (result.reward, result.expected_answer, result.extracted_answer) == (1.0, "B", "B")


def test_a_wrong_letter_earns_zero() -> None:
    result = graded("\\boxed{C}")
    assert (result.reward, result.extracted_answer) == (0.0, "C")


def test_expected_answer_is_trimmed_and_upper_cased() -> None:
    assert graded("\\boxed{B}", expected=" b ").reward == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("First \\boxed{A}, on reflection \\boxed{B}", "B"),  # the last box wins
        ("\\boxed{\\text{B}}", "B"),
        ("\\boxed{(B)}", "B"),
        ("\\boxed{[B]}", "B"),
        ("\\boxed{B: Polymerase Chain Reaction (PCR)}", "B"),
        ("\\boxed{B) PCR}", "B"),
        ("\\boxed{b}", None),  # strict: upper case only
        ("\\boxed{D}", None),  # not an option
        ("\\boxed{Polymerase Chain Reaction (PCR)}", None),  # option text: lenient only
        ("The answer is B.", None),  # no box
        ("\\boxed{B", None),  # never closed
        ("\\boxed{AB}", None),
    ],
)
def test_strict_single_letter_boxed(text: str, expected: str | None) -> None:
    assert letter(text) == expected


def test_strict_is_the_default_mode() -> None:
    assert graded("\\boxed{B}").extracted_answer == "B"
    assert graded("Answer: B").extracted_answer is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{B}", "B"),
        ("\\boxed{Polymerase Chain Reaction (PCR)}", "B"),
        ("\\boxed{\\text{southern   BLOTTING}}", "C"),
        ("\\boxed{Karyotyping or Southern blotting}", None),  # two options: ambiguous
        ("Polymerase Chain Reaction (PCR)", None),  # only inside the box
    ],
)
def test_lenient_boxed(text: str, expected: str | None) -> None:
    assert letter(text, "lenient_boxed") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: B", "B"),
        ("answer : b", "B"),
        ("Answer: \\text{B}", "B"),
        ("Answer: polymerase chain reaction (PCR)", "B"),
        ("Answer: D", None),
        ("Answer: B because PCR amplifies", None),  # neither a lone letter nor an option's text
        ("Answer: A\nAnswer: B", "A"),  # the first "Answer:"
        ("\\boxed{B}", None),
    ],
)
def test_lenient_answer_colon(text: str, expected: str | None) -> None:
    assert letter(text, "lenient_answer_colon") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**Answer:** B", "B"),
        ("_Answer_: (C)", "C"),
        ("Answer: B because PCR amplifies the region", "B"),
        ("Answer: A\n\nOn reflection:\nAnswer: C", "C"),  # the last payload that names a letter
        ("Answer: C\nAnswer: none of these", "C"),
        ("Answer: A or B", None),  # a list of choices
        ("Answer: A, C", None),
        ("Answer: D", None),
        ("Ａｎｓｗｅｒ: Ｂ", None),  # read as written: no Unicode normalisation
        ("Answer: Ｂ", "B"),  # NeMo-Skills' foreign-letter map covers full-width A-D ...
        ("Answer: Ｅ", None),  # ... and nothing else
        ("\\boxed{B}", None),  # no boxed fallback
    ],
)
def test_lenient_answer_colon_md(text: str, expected: str | None) -> None:
    assert letter(text, "lenient_answer_colon_md", options=[{k: k} for k in "ABCE"]) == expected


def test_lenient_answer_colon_md_reads_no_other_answer_prefix() -> None:
    prefix = {"answer_prefix": "The final choice is"}
    assert letter("The final choice is C", "lenient_answer_colon_md", template_metadata=prefix) is None
    assert letter("so \\boxed{B}", "lenient_answer_colon_md", template_metadata=prefix) is None


def test_output_regex_takes_priority_over_the_grading_mode() -> None:
    row = {"template_metadata": {"output_regex": r"final choice:\s*([A-Z])"}}
    assert letter("Final choice: C, though \\boxed{B}", **row) == "C"
    assert letter("Final choice: A ... final choice: C", **row) == "C"  # its last match


def test_output_regex_falls_back_to_the_mode_when_it_finds_nothing() -> None:
    assert letter("\\boxed{B}", template_metadata={"output_regex": r"choice: ([A-Z])"}) == "B"
    assert letter("\\boxed{B}", template_metadata={"output_regex": "(unclosed"}) == "B"  # bad pattern


def test_output_regex_lists_are_tried_in_order() -> None:
    row = {"template_metadata": {"output_regex": [r"pick ([A-Z])", r"choice ([A-Z])"]}}
    assert letter("choice C", **row) == "C"
    assert letter("pick A, choice C", **row) == "A"


def test_output_regex_is_trusted_beyond_the_options_and_reads_option_text() -> None:
    assert letter("choice: Z", template_metadata={"output_regex": r"choice: (\w)"}) == "Z"
    assert letter("choice: karyotyping", template_metadata={"output_regex": r"choice: (.+)"}) == "A"
    assert letter("x: A y: B", template_metadata={"output_regex": r"x: (\w) y: (\w)"}) == "A"


def test_allowed_letters_come_from_options() -> None:
    options = [{"A": "one"}, {"Z": "zebra"}, {"C": None}]
    assert letter("\\boxed{Z}", options=options) == "Z"
    assert letter("\\boxed{C}", options=options) is None  # a null option is no option
    assert letter("\\boxed{A}", options=None) is None  # no options, no letters


def test_reference_row_right_and_wrong() -> None:
    row = example_rows("mcqa")[0]  # expected B, strict mode, options A-J
    right = grade(msgspec.convert({**row, "response": response("so \\boxed{B}")}, McqaRequest))
    wrong = grade(msgspec.convert({**row, "response": response("\\boxed{J}")}, McqaRequest))
    outside = grade(msgspec.convert({**row, "response": response("\\boxed{K}")}, McqaRequest))
    assert (right.reward, wrong.reward, outside.reward) == (1.0, 0.0, 0.0)
    assert (wrong.extracted_answer, outside.extracted_answer) == ("J", None)


@pytest.mark.parametrize(
    ("row", "error_type"),
    [
        ({"expected_answer": None}, "missing_expected_answer"),
        ({"expected_answer": ""}, "missing_expected_answer"),
        ({"expected_answer": 2}, "invalid_expected_answer"),
        ({"options": "A, B, C"}, "invalid_options"),
        ({"options": [{"A": 1}]}, "invalid_options"),
        ({"grading_mode": "vibes"}, "unknown_grading_mode"),
        ({"template_metadata": "x"}, "invalid_template_metadata"),
        ({"template_metadata": {"output_regex": 5}}, "invalid_template_metadata"),
    ],
)
def test_malformed_rows_score_zero_with_a_reason(row: dict[str, Any], error_type: str) -> None:
    result = graded("\\boxed{B}", **row)
    assert (result.reward, result.extracted_answer, result.error_type) == (0.0, None, error_type)


@pytest.mark.parametrize("texts", [(), ("",), ("   \n",)])
def test_a_response_without_text_scores_zero(texts: tuple[str, ...]) -> None:
    result = graded(texts)
    assert (result.reward, result.extracted_answer, result.error_type) == (0.0, None, "empty_response")


def test_a_clean_result_has_no_error_type_on_the_wire() -> None:
    assert json.loads(msgspec.json.encode(graded("\\boxed{B}"))) == {
        "reward": 1.0,
        "expected_answer": "B",
        "extracted_answer": "B",
    }


async def test_the_grading_mode_setting_overrides_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    request = verify_request(
        McqaRequest,
        "Answer: B",
        options=OPTIONS,
        expected_answer="B",
        grading_mode="strict_single_letter_boxed",
    )
    assert (await verify(request, Session(id="s"))).reward == 0.0
    monkeypatch.setenv("GYMBUS_MCQA", '{"grading_mode": "lenient_answer_colon"}')
    assert (await verify(request, Session(id="s"))).reward == 1.0
    monkeypatch.setenv("GYMBUS_MCQA", '{"grading_mode": "vibes"}')
    with pytest.raises(BadRequest, match="GYMBUS_MCQA"):
        await verify(request, Session(id="s"))


async def test_a_malformed_row_is_a_reward_not_an_error_on_the_wire() -> None:
    spec = environment_service(ENVIRONMENTS["mcqa"], MemoryState())
    [endpoint] = [one for one in spec.endpoints if one.name == "verify"]
    body = {
        "responses_create_params": {"input": "Q?"},
        "response": {"id": "r", "created_at": 0, "model": "m", "output": []},
        "expected_answer": ["B"],
        "options": {"A": "x"},
    }
    reply = json.loads(await endpoint.handler(msgspec.json.encode(body), {}))
    assert reply == {
        "reward": 0.0,
        "expected_answer": "",
        "extracted_answer": None,
        "error_type": "invalid_expected_answer",
    }


def test_mcqa_serves_the_agent_name_datasets_use() -> None:
    assert ENVIRONMENTS["mcqa"].agents == ("mcqa_simple_agent",)
    assert ENVIRONMENTS["mcqa"].tools == ()


def test_metrics_are_nemo_gyms_pass_and_majority_of_accuracy() -> None:
    spec = ENVIRONMENTS["mcqa"].metrics
    assert spec is not None and spec.key_metrics is not None and spec.per_task is not None
    rows = [
        [{"reward": 1.0, "extracted_answer": "B"}, {"reward": 0.0, "extracted_answer": "C"}],
        [{"reward": 0.0, "extracted_answer": None}, {"reward": 0.0, "extracted_answer": "A"}],
    ]
    tasks = [[spec.project(row_fields(json.dumps(row).encode())) for row in task] for task in rows]
    metrics = {"mean/reward": 0.25, **spec.compute(tasks)}
    assert metrics["pass@1/accuracy"] == pytest.approx(25.0)
    assert metrics["pass@2/accuracy"] == pytest.approx(50.0)
    assert metrics["majority@2/accuracy"] == pytest.approx(25.0)  # B ties C in task 0
    assert metrics["pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == pytest.approx(35.355, abs=1e-3)
    assert spec.key_metrics(metrics) == {
        "mean/reward": 0.25,
        "pass@1[avg-of-2]/accuracy": pytest.approx(25.0),
        "pass@1[avg-of-2]/no_answer": pytest.approx(25.0),
        "pass@2/no_answer": pytest.approx(50.0),
        "majority@2/accuracy": pytest.approx(25.0),
        "pass@1/accuracy": pytest.approx(25.0),
    }
    assert spec.per_task(tasks[0])["pass@2/accuracy"] == 100.0
