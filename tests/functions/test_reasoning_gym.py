"""`reasoning_gym`'s reward rule (answer extraction, the task's own scorer, bad rows) and
the task-row generator with its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymbus.functions.environments import reasoning_gym as reasoning_gym_env
from gymbus.functions.environments.reasoning_gym import extract_answer, task_rows
from tests.functions.text_verifier_rows import call, example_rows, message, verify

ENV = "reasoning_gym"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reasoning_gym_dataset.py"


@pytest.fixture
def row() -> dict[str, Any]:
    return example_rows(ENV)[0]  # knights and knaves: "Zoey is a fool, and Riley is a sage."


def test_extraction_prefers_the_last_answer_tag_then_the_first_box_then_the_text() -> None:
    assert extract_answer("<answer> a </answer> then <answer>b</answer> \\boxed{c}") == "b"
    assert extract_answer("so \\boxed{ 42 } or \\boxed{7}") == "42"
    assert extract_answer("  just this  ") == "just this"
    assert extract_answer("<answer>unclosed \\boxed{x}") == "x"


async def test_the_right_answer_earns_one(row: dict[str, Any]) -> None:
    text = "Thinking...\n<answer>Zoey is a fool, and Riley is a sage.</answer>"
    result = await verify(ENV, row, message(text))
    assert result == {
        "reward": 1.0,
        "task_name": "knights_knaves",
        "score": 1.0,
        "extracted_answer": "Zoey is a fool, and Riley is a sage.",
    }


async def test_boxed_and_bare_answers_are_scored_too(row: dict[str, Any]) -> None:
    boxed = await verify(ENV, row, message("\\boxed{Riley is a sage, and Zoey is a fool}"))
    assert boxed["reward"] == 1.0
    bare = await verify(ENV, row, message("Zoey is a fool, and Riley is a sage."))
    assert bare["reward"] == 1.0 and bare["extracted_answer"] == "Zoey is a fool, and Riley is a sage."


async def test_wrong_and_partly_right_answers_get_the_scorers_score(row: dict[str, Any]) -> None:
    wrong = await verify(ENV, row, message("<answer>Zoey is a sage, and Riley is a fool.</answer>"))
    assert wrong["reward"] == 0.0 and wrong["score"] == 0.0
    half = await verify(ENV, row, message("<answer>Zoey is a sage, and Riley is a sage.</answer>"))
    assert half["reward"] == pytest.approx(0.65) and half["score"] == half["reward"]
    junk = await verify(ENV, row, message("<answer>no idea</answer>"))
    assert junk["reward"] == 0.0 and junk["extracted_answer"] == "no idea"


async def test_messages_are_joined_and_other_items_ignored(row: dict[str, Any]) -> None:
    result = await verify(
        ENV, row, message("<answer>Zoey is a fool, "), call("x", {}), message("and Riley is a sage.</answer>")
    )
    assert result["reward"] == 1.0


@pytest.mark.parametrize(
    ("change", "error_type"),
    [
        ({"metadata": {"names": ["A"]}}, "missing_field"),
        ({"metadata": None}, "missing_field"),
        ({"answer": 42}, "invalid_row"),
        ({"metadata": {"source_dataset": "no_such_task"}}, "unknown_task"),
    ],
)
async def test_bad_rows_earn_zero_with_a_reason(
    row: dict[str, Any], change: dict[str, Any], error_type: str
) -> None:
    result = await verify(
        ENV, {**row, **change}, message("<answer>Zoey is a fool, and Riley is a sage.</answer>")
    )
    assert (result["reward"], result["score"], result["error_type"]) == (0.0, 0.0, error_type)
    assert result["error_message"]


async def test_a_scorer_that_raises_earns_zero(row: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        def score(answer: str, entry: dict[str, Any]) -> float:
            raise KeyError("solution")

        return score

    monkeypatch.setattr(reasoning_gym_env, "_scorer", broken)
    result = await verify(ENV, row, message("<answer>x</answer>"))
    assert (result["reward"], result["error_type"]) == (0.0, "scoring_error")
    assert "KeyError" in result["error_message"]


async def test_an_empty_response_earns_zero(row: dict[str, Any]) -> None:
    for output in ([message("  ")], [], [call("x", {})]):
        result = await verify(ENV, row, *output)
        assert (result["reward"], result["error_type"]) == (0.0, "empty_response")


async def test_generated_rows_are_scored_by_their_task() -> None:
    rows = list(task_rows("mini_sudoku", size=3, seed=7))
    assert rows == list(task_rows("mini_sudoku", size=3, seed=7))  # deterministic
    for row in rows:
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": "reasoning_gym_simple_agent"}
        assert row["responses_create_params"]["input"][0]["content"] == row["question"]
        assert (await verify(ENV, row, message(f"<answer>{row['answer']}</answer>")))["reward"] == 1.0
        assert (await verify(ENV, row, message("<answer>1 1 1 1</answer>")))["reward"] < 0.1


def test_the_script_writes_nemo_gym_rows(tmp_path: Path) -> None:
    out = tmp_path / "data" / "sudoku.jsonl"
    command = [
        sys.executable,
        str(SCRIPT),
        "--task",
        "mini_sudoku",
        "--size",
        "20",
        "--seed",
        "42",
        "--output",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 20
    assert {row["metadata"]["source_dataset"] for row in rows} == {"mini_sudoku"}
    assert rows[0] == json.loads(json.dumps(next(task_rows("mini_sudoku", 20, 42))))


def test_the_script_reports_an_unknown_task(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(SCRIPT),
        "--task",
        "nope",
        "--size",
        "2",
        "--output",
        str(tmp_path / "x.jsonl"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "nope" in done.stderr
    assert not (tmp_path / "x.jsonl").exists()
