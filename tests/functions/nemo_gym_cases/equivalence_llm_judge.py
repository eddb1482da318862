"""equivalence_llm_judge: NeMo Gym's `resources_servers/equivalence_llm_judge/tests/test_app.py`.

NeMo Gym's tests build the server from its config class, with the class defaults that its
shipped config changes (a 120-character threshold and a full-generation rescue at 0.5);
`TESTED` sets those. The judge prompt is NeMo Gym's template in both.
"""

from __future__ import annotations

from typing import Any

from gymbus.functions.environments.equivalence_llm_judge import JUDGE_PROMPT

from . import Case, message

TESTED: dict[str, Any] = {
    "judge_model_server": {"type": "responses_api_models", "name": "judge"},
    "extraction_length_threshold": 120,
    "check_full_generation_on_fail": True,
    "reward_if_full_generation_succeeds": 0.5,
}
SWAP = {**TESTED, "check_twice_swap": True}
PHOTOSYNTHESIS = "Photosynthesis is the process by which plants convert light energy into chemical energy stored in glucose."


def prompt(question: str, expected: str, generated: str) -> str:
    return JUDGE_PROMPT.format(question=question, expected_answer=expected, generated_answer=generated)


def row(question: str | None, expected: str, **extra: Any) -> dict[str, Any]:
    messages = [] if question is None else [{"role": "user", "content": question}]
    return {"responses_create_params": {"input": messages}, "expected_answer": expected, **extra}


def asked(question: Any) -> dict[str, Any]:
    """A row whose input is `question` (a message list), expected "x"."""
    return {"responses_create_params": {"input": question}, "expected_answer": "x"}


IMAGE = {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQSkZJRg==", "detail": "high"}

CASES = [
    Case("judged equal", row("Q: 1+1?", "2"), [message("It is 2.")], 1.0, {"expected_answer": "2"},
         settings=TESTED, judge=("some text [[A=B]] trailing",), judge_prompts=(prompt("Q: 1+1?", "2", "It is 2."),)),
    Case("judged equal twice with the swap", row("Q: 1+1?", "2"), [message("It is 2.")], 1.0, settings=SWAP,
         judge=("[[A=B]]", "[[A=B]]"),
         judge_prompts=(prompt("Q: 1+1?", "2", "It is 2."), prompt("Q: 1+1?", "It is 2.", "2"))),
    Case("judged not equal", row("Q: 1+1?", "2"), [message("It is 3.")], 0.0, settings=TESTED, judge=("[[A!=B]]",)),
    Case("no label is not equal", row(None, "x"), [message("text")], 0.0, settings=TESTED,
         judge=("no label present",)),
    Case("no assistant text is the configured failure message", row(None, "x"), [], 0.0,
         settings={**TESTED, "msg_extraction_failure": "[CUSTOM EXTRACTION FAILURE]"}, judge=("[[A!=B]]",),
         judge_prompts=(prompt("", "x", "[CUSTOM EXTRACTION FAILURE]"),)),
    Case("a failed swap earns the configured reward", row("Q?", "B"), [message("A")], -1.0,
         settings={**SWAP, "reward_if_swap_fails": -1.0}, judge=("[[A=B]]", "[[A!=B]]")),
    Case("the row's regex cuts the answer", row("What is 2+2?", "4", template_metadata={"output_regex": r"\\boxed\{(.*?)\}"}),
         [message("Let me explain: The answer is \\boxed{4} because 2+2=4.")], 1.0, settings=TESTED,
         judge=("[[A=B]]",), judge_prompts=(prompt("What is 2+2?", "4", "4"),)),
    Case("the whole answer rescues a failed extraction at half",
         row("What is 2+2?", "4", template_metadata={"output_regex": r"ANSWER:\s*(.+)"}),
         [message("The final answer is clearly 4")], 0.5, settings=TESTED, judge=("[[A!=B]]", "[[A=B]]")),
    Case("a long expected answer skips the regex and the second pass",
         row("Explain photosynthesis.", PHOTOSYNTHESIS, template_metadata={"output_regex": r"\\boxed\{(.*?)\}"}),
         [message(PHOTOSYNTHESIS)], 1.0, settings={**TESTED, "extraction_length_threshold": 50}, judge=("[[A=B]]",),
         judge_prompts=(prompt("Explain photosynthesis.", PHOTOSYNTHESIS, PHOTOSYNTHESIS),)),
    # _extract_question_text cases, seen in the judge's prompt
    Case("the question is a multimodal turn's text",
         asked([{"role": "system", "content": "Answer the question."},
                {"role": "user", "content": [{"type": "input_text", "text": "Which piece delivers mate?"}, IMAGE]}]),
         [message("the rook")], 0.0, settings=TESTED, judge=("[[A!=B]]",),
         judge_prompts=(prompt("Which piece delivers mate?", "x", "the rook"),)),
    Case("the question is the last user turn, stripped",
         asked([{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"},
                {"role": "user", "content": "  second question  "}]),
         [message("y")], 0.0, settings=TESTED, judge=("[[A!=B]]",), judge_prompts=(prompt("second question", "x", "y"),)),
    Case("an image-only turn gives an empty question",
         asked([{"role": "user", "content": [{**IMAGE, "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]),
         [message("y")], 0.0, settings=TESTED, judge=("[[A!=B]]",), judge_prompts=(prompt("", "x", "y"),)),
    # Read from the shipped configs/equivalence_llm_judge.yaml: no rescue pass by default.
    Case("the shipped config does not rescue", row("What is 2+2?", "4", template_metadata={"output_regex": r"ANSWER:\s*(.+)"}),
         [message("The final answer is clearly 4")], 0.0, judge=("[[A!=B]]",),
         judge_prompts=(prompt("What is 2+2?", "4", "The final answer is clearly 4"),), source="code"),
]  # fmt: skip
