"""Joining NeMo Gym rollouts, which lack their task fields, with the inputs they came from."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbus.runner.verification._join import UNMATCHED, InputIndex
from gymbus.schemas import InputError, RolloutFailed

AGENT = {"type": "responses_api_agents", "name": "mcqa_simple_agent"}
RESPONSE = {"id": "r", "created_at": 0, "model": "m", "output": []}


def task(question: str, expected: str, task_index: int | None, rollout_index: int | None) -> dict[str, Any]:
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": question}], "temperature": 1.0},
        "options": [{"A": "yes"}, {"B": "no"}],
        "expected_answer": expected,
        "agent_ref": AGENT,
        "_ng_task_index": task_index,
        "_ng_rollout_index": rollout_index,
    }
    return {name: value for name, value in row.items() if value is not None}


def rollout(
    question: str, reward: float, task_index: int | None = None, rollout_index: int | None = None
) -> bytes:
    """A rollout as NeMo Gym writes it: the request spelled out in full, no task fields."""
    params = {
        "input": [{"role": "user", "content": question, "type": "message"}],
        "temperature": 1.0,
        "top_p": None,
        "instructions": None,
    }
    row: dict[str, Any] = {"responses_create_params": params, "response": RESPONSE, "reward": reward}
    row |= {"agent_ref": AGENT, "expected_answer": "STALE"}
    if task_index is not None:
        row |= {"_ng_task_index": task_index, "_ng_rollout_index": rollout_index}
    return json.dumps(row).encode()


def write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def materialized(tmp_path: Path) -> Path:
    """Two tasks, two rollouts each, as NeMo Gym's `<stem>_materialized_inputs.jsonl`."""
    rows = [
        task(q, e, t, r)
        for t, (q, e) in enumerate([("Is 2 even?", "A"), ("Is 3 even?", "B")])
        for r in (0, 1)
    ]
    return write(tmp_path / "out_materialized_inputs.jsonl", rows)


@pytest.fixture
def build() -> Iterator[Callable[[Path], InputIndex]]:
    """`InputIndex.build`, every index closed after the test."""
    built: list[InputIndex] = []

    def make(path: Path) -> InputIndex:
        built.append(InputIndex.build(path))
        return built[-1]

    yield make
    for index in built:
        index.close()


def joined(index: InputIndex, line: bytes, number: int = 1) -> dict[str, Any]:
    """The verify request, with the stored reward beside it as `reward`."""
    request, reward = index.join(line, "rollouts.jsonl", number)
    decoded: dict[str, Any] = json.loads(request)
    assert "reward" not in decoded  # never sent back to the verifier
    return decoded | ({"reward": json.loads(bytes(reward))} if reward is not None else {})


def test_a_rollout_joins_the_input_row_of_its_task_and_rollout_index(materialized: Path) -> None:
    with InputIndex.build(materialized) as index:
        row = joined(index, rollout("Is 3 even?", 0.0, task_index=1, rollout_index=1))
    assert row["options"] == [{"A": "yes"}, {"B": "no"}]
    assert row["expected_answer"] == "B"  # the input row's fields win over the rollout's
    assert (row["_ng_task_index"], row["_ng_rollout_index"]) == (1, 1)
    assert (row["response"], row["reward"]) == (RESPONSE, 0.0)  # the rollout's, always
    assert row["responses_create_params"]["input"][0] == {"role": "user", "content": "Is 3 even?"}
    assert (index.tally.by_key, index.tally.by_prompt, index.tally.input_rows) == (1, 0, 4)
    assert index.agents == {"mcqa_simple_agent"}


def test_what_the_servers_verify_added_to_a_rollout_is_not_sent_back(
    tmp_path: Path, build: Callable[[Path], InputIndex]
) -> None:
    """As NeMo Gym 0.7.0's `gym eval reverify` builds the request: the input row, the rollout's
    response and the verifier's own inputs from the rollout; iheval's verify spreads its
    request into its reply, so a stored `strict` sent back is a duplicate keyword."""
    inputs = write(tmp_path / "example.jsonl", [task("Is 2 even?", "A", None, None)])
    stored = json.loads(rollout("Is 2 even?", 0.75, task_index=0, rollout_index=0))
    stored |= {"strict": 1.0, "loose": 0.5, "prompt_strict": 1.0, "correct": True, "generation": "A"}
    stored |= {"deliverables_dir": "out/0", "reference_ids": [3]}
    row = joined(build(inputs), json.dumps(stored).encode())
    assert sorted(row) == sorted([*task("Is 2 even?", "A", 0, 0), "response", "reward", "deliverables_dir",
                                  "reference_ids"])  # fmt: skip
    assert (row["_ng_task_index"], row["reward"], row["reference_ids"]) == (0, 0.75, [3])


def test_a_rollout_without_indices_joins_by_its_prompt(
    materialized: Path, tmp_path: Path, build: Callable[[Path], InputIndex]
) -> None:
    index = build(materialized)
    assert joined(index, rollout("Is 2 even?", 1.0))["expected_answer"] == "A"
    dataset = write(
        tmp_path / "dataset.jsonl", [task("Is 2 even?", "A", None, None), task("Is 3 even?", "B", None, None)]
    )
    plain = build(dataset)  # the task file itself: no indices on either side
    assert joined(plain, rollout("Is 3 even?", 1.0, task_index=7, rollout_index=0))["expected_answer"] == "B"
    assert (plain.tally.by_key, plain.tally.by_prompt) == (0, 1)


def test_a_prompt_shared_by_different_tasks_joins_nothing(
    tmp_path: Path, build: Callable[[Path], InputIndex]
) -> None:
    inputs = write(
        tmp_path / "in.jsonl", [task("Same?", "A", 0, 0), task("Same?", "B", 1, 0), task("Same?", "B", 1, 1)]
    )
    index = build(inputs)
    with pytest.raises(
        RolloutFailed, match=r"^rollouts.jsonl:5: its prompt is that of several tasks in in.jsonl"
    ) as e:
        joined(index, rollout("Same?", 1.0), 5)
    assert e.value.failure_class == UNMATCHED
    assert joined(index, rollout("Same?", 1.0, task_index=1, rollout_index=1))["expected_answer"] == "B"


def test_an_unmatched_rollout_names_its_line_and_key(
    materialized: Path, build: Callable[[Path], InputIndex]
) -> None:
    index = build(materialized)
    with pytest.raises(RolloutFailed, match="rollouts.jsonl:9: no row of out_materialized_inputs.jsonl has "
                       "_ng_task_index 5 and _ng_rollout_index 0, nor its prompt"):  # fmt: skip
        index.join(rollout("Is 9 even?", 1.0, task_index=5, rollout_index=0), "rollouts.jsonl", 9)
    with pytest.raises(RolloutFailed, match="has its prompt"):
        index.join(rollout("Is 9 even?", 1.0), "rollouts.jsonl", 10)
    with pytest.raises(InputError, match="rollouts.jsonl:11: not a JSON object"):
        index.join(b"{oops", "rollouts.jsonl", 11)
    assert index.tally.unmatched == 2


def test_lines_that_are_not_task_rows_are_skipped_and_counted(
    tmp_path: Path, build: Callable[[Path], InputIndex]
) -> None:
    inputs = write(
        tmp_path / "in.jsonl", ["{oops", task("Q?", "A", 0, 0), "[1]", '{"expected_answer": "A"}', ""]
    )
    index = build(inputs)
    assert (index.tally.input_rows, index.tally.skipped_lines, index.tally.noted_lines) == (1, 3, [1, 3, 4])
    assert joined(index, rollout("Q?", 1.0, 0, 0))["expected_answer"] == "A"


def test_of_two_rows_with_one_key_the_later_joins_as_in_nemo_gym(
    tmp_path: Path, build: Callable[[Path], InputIndex]
) -> None:
    index = build(write(tmp_path / "in.jsonl", [task("Q?", "A", 0, 0), task("Q?", "B", 0, 0)]))
    assert joined(index, rollout("Q?", 1.0, 0, 0))["expected_answer"] == "B"
