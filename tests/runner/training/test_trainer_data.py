"""The dataset a trainer reads: every row's prompt as chat messages, and its whole task."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from gymbus.runner import prompt_messages, tasks_dataset
from gymbus.runner.training._data import TaskIndex
from gymbus.schemas import InputError, ResponsesCreateParams
from tests.conftest import EXAMPLES


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_every_row_keeps_its_whole_task_and_its_agent() -> None:
    paths = [EXAMPLES / "example_multi_turn.jsonl", EXAMPLES / "mcqa.jsonl"]
    dataset = tasks_dataset([paths[0], (paths[1], "mcqa_simple_agent")], agent="not_used_here")
    lines = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    assert len(dataset) == len(lines)
    for row, line in zip(dataset, lines, strict=True):
        task = json.loads(row["task"])
        assert {key: value for key, value in task.items() if key != "agent_ref"} == {
            key: value for key, value in line.items() if key != "agent_ref"
        }
        expected_agent = line.get("agent_ref", {}).get("name", "mcqa_simple_agent")  # the file's agent
        assert task["agent_ref"]["name"] == row["agent"] == expected_agent


def test_the_prompt_is_the_chat_messages_trl_expects() -> None:
    dataset = tasks_dataset(EXAMPLES / "example_single_tool_call.jsonl", agent="weather_agent")
    assert dataset[0]["prompt"] == [
        {
            "role": "system",
            "content": "You are a helpful personal assistant that aims to be helpful and reduce any pain "
            "points the user has.",
        },
        {"role": "user", "content": "what's it like in sf?"},
    ]


def test_prompt_messages_cover_instructions_calls_and_outputs() -> None:
    call = {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"}', "call_id": "c"}
    params = {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
            {"type": "reasoning", "summary": []},
            call,
            {"type": "function_call_output", "call_id": "c", "output": "cold"},
        ],
    }
    assert prompt_messages(msgspec.convert(params, ResponsesCreateParams)) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": json.dumps({"name": "get_weather", "arguments": '{"city": "Oslo"}'}),
        },
        {"role": "tool", "content": "cold"},
    ]


def test_a_prompt_finds_its_task_in_the_dataset_trl_holds() -> None:
    dataset = tasks_dataset(EXAMPLES / "example_multi_turn.jsonl")
    index = TaskIndex.of_dataset(dataset)
    for position, row in enumerate(dataset):
        assert index.find(row["prompt"]) == (position, row["task"])
    assert index.find([{"role": "user", "content": "not in the dataset"}]) is None


def test_a_row_without_an_agent_and_no_default_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "rows.jsonl", [{"responses_create_params": {"input": "hi"}}])
    with pytest.raises(InputError, match=r"rows.jsonl:1: field `agent_ref`"):
        tasks_dataset(path)


def test_a_bad_row_names_its_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path / "rows.jsonl",
        [{"responses_create_params": {"input": "hi"}}, {"responses_create_params": {"input": 3}}],
    )
    with pytest.raises(InputError, match=r"rows.jsonl:2: field `responses_create_params.input`"):
        tasks_dataset(path, agent="a")


def test_two_rows_with_one_prompt_but_different_tasks_are_refused(tmp_path: Path) -> None:
    same = {"input": "What is 2+2?"}
    rows = [
        {"responses_create_params": same, "expected_answer": "4"},
        {"responses_create_params": same, "expected_answer": "4"},  # the same task again: fine
        {"responses_create_params": same, "expected_answer": "5"},
    ]
    path = write(tmp_path / "rows.jsonl", rows)
    with pytest.raises(InputError, match=r"rows.jsonl:3: .*same prompt as .*rows.jsonl:1"):
        tasks_dataset(path, agent="a")
    assert len(tasks_dataset(write(tmp_path / "ok.jsonl", rows[:2]), agent="a")) == 2


def test_a_file_without_an_agent_takes_the_default(tmp_path: Path) -> None:
    path = write(tmp_path / "rows.jsonl", [{"responses_create_params": {"input": "hi"}}])
    dataset = tasks_dataset([(path, None)], agent="fallback_agent")
    assert dataset["agent"] == ["fallback_agent"]
    assert json.loads(dataset[0]["task"])["agent_ref"] == {
        "type": "responses_api_agents",
        "name": "fallback_agent",
    }
