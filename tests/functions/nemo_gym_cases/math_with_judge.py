"""math_with_judge: NeMo Gym's `resources_servers/math_with_judge/tests/test_app.py`.

NeMo Gym's tests build the server from its config class, whose `should_use_judge` defaults
to true (its shipped config turns it off); the judge cases here set it as they do.
"""

from __future__ import annotations

from gymbus.functions.environments.math_with_judge import JUDGE_PROMPT

from . import Case, message, reasoning, refusal

JUDGE = {
    "should_use_judge": True,
    "judge_model_server": {"type": "responses_api_models", "name": "math_judge"},
}
NO_JUDGE = {"should_use_judge": False}


def prompt(question: str, first: str, second: str) -> str:
    return JUDGE_PROMPT.format(question=question, first_answer=first, second_answer=second)


def row(question: str, expected: str) -> dict[str, object]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": question}]},
        "question": question,
        "expected_answer": expected,
    }


def library(name: str, expected: str, text: str, reward: float, extracted: str | None) -> Case:
    fields = {"library_reward": reward, "extracted_answer": extracted}
    return Case(name, row("Q?", expected), [message(text)], reward, fields, settings=NO_JUDGE)


SIMPLIFY = "Simplify the expression x + 7 - 6"

CASES = [
    # test_verify: "$1" is not x + 1; the judge is asked about math-verify's reading, "1".
    Case("an unboxed wrong answer goes to the judge", row(SIMPLIFY, "x + 1"), [message("$1")], 0.0,
         {"library_reward": 0.0, "extracted_answer": "1"}, settings=JUDGE,
         judge=("[[A!=B]] done",), judge_prompts=(prompt(SIMPLIFY, "x + 1", "1"),)),
    # test_verify: the assistant text of every message is joined ("$1" + " + x$"), reasoning
    # and refusals skipped, and math-verify reads the unboxed "$1 + x$" as x + 1.
    Case("an unboxed right answer across messages", row(SIMPLIFY, "x + 1"),
         [message("$1"), reasoning(), message(" + x$"), refusal("no response")], 1.0,
         {"library_reward": 1.0, "extracted_answer": "x + 1", "judge_evaluations": None}, settings=JUDGE),
    # test_verify_answer
    Case("a boxed right answer needs no judge", row("What is 3 plus 5?", "8"), [message("3 + 5 = \\boxed{8}")],
         1.0, {"library_reward": 1.0, "extracted_answer": "8", "judge_evaluations": None}, settings=JUDGE),
    Case("the judge says not equal", row("What is 1 + 1?", "2"), [message("3")], 0.0,
         {"library_reward": 0.0, "extracted_answer": "3"}, settings=JUDGE, judge=("Conclusion: [[A!=B]]",),
         judge_prompts=(prompt("What is 1 + 1?", "2", "3"),)),
    Case("the judge says equal in both orders", row("What is 14 divided by 10?", "1.4"),
         [message("Final answer: {7 / 5}")], 1.0, {"library_reward": 0.0, "extracted_answer": "5"},
         settings=JUDGE, judge=("I say [[A=B]] as the verdict", "[[A=B]]"),
         judge_prompts=(prompt("What is 14 divided by 10?", "1.4", "5"), prompt("What is 14 divided by 10?", "5", "1.4"))),
    # test_verify_answer_with_library_async
    library("boxed 4", "4", "2 + 2 = \\boxed{4}", 1.0, "4"),
    library("a boxed gold", "\\boxed{12}", "3 * 4 = \\boxed{12}", 1.0, "12"),
    library("a boxed gold, subtraction", "\\boxed{5}", "10 - 5 = \\boxed{5}", 1.0, "5"),
    library("a fraction equals 4.0", "4.0", "2 + 2 = \\boxed{\\frac{8}{2}}", 1.0, "4"),
    library("an unboxed wrong answer", "\\boxed{12}", "3 * 4 = 13", 0.0, "13"),
    library("17 is not 17.001", "17.001", "17", 0.0, "17"),
    library("nothing against nothing", "", "", 0.0, None),
    library("an unboxed right answer", "3", "3", 1.0, "3"),
    # test_verify_answer_with_judge (its other two cases never reach the judge through
    # verify: math-verify already equates 1/2 with 0.5 and 20 with 20.0)
    Case("the first judge order says not equal", row("What is 2 + 2?", "4"), [message("5")], 0.0,
         {"library_reward": 0.0, "extracted_answer": "5"}, settings=JUDGE, judge=("[[A!=B]] is the evaluation",),
         judge_prompts=(prompt("What is 2 + 2?", "4", "5"),)),
    # Read from math_with_judge/app.py: with no reading, the judge sees the whole response.
    Case("the judge sees the whole response when nothing is extracted", row("How many?", "32"),
         [message("The count is thirty-two.")], 1.0, {"library_reward": 0.0, "extracted_answer": None},
         settings=JUDGE, judge=("[[A=B]]", "[[A=B]]"),
         judge_prompts=(prompt("How many?", "32", "The count is thirty-two."),
                        prompt("How many?", "The count is thirty-two.", "32")), source="code"),
]  # fmt: skip
