"""The viewer's index: list columns, skipped lines, a growing file, filters, histograms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gymbus.runner.viewer._index import FileChanged, Query, RolloutIndex
from gymbus.runner.viewer._rows import NotARow, summarize
from gymbus.schemas import VIEW_LIMITS, ViewLimits


def rollout(task: int, reward: Any = 1.0, agent: str = "weather_agent", **extra: Any) -> dict[str, Any]:
    call = {
        "type": "function_call",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
        "call_id": f"c{task}",
    }
    output = [call, {"type": "function_call_output", "call_id": f"c{task}", "output": "cold"},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Cold."}]}]  # fmt: skip
    return {"responses_create_params": {"input": "weather in Oslo?"}, "response": {"output": output},
            "reward": reward, "agent_ref": {"name": agent}, "_ng_task_index": task, "_ng_rollout_index": 0,
            **extra}  # fmt: skip


def write(path: Path, *lines: str | dict[str, Any], end: str = "\n") -> Path:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(text + end)
    return path


def indexed(path: Path, limits: ViewLimits = VIEW_LIMITS) -> RolloutIndex:
    index = RolloutIndex(path, limits)
    index.refresh()
    return index


def test_a_row_summary_counts_model_turns_and_tool_calls() -> None:
    summary = summarize(json.dumps(rollout(3, reward=0.5)).encode())
    assert (summary.reward, summary.agent, summary.task, summary.rollout) == (0.5, "weather_agent", 3, 0)
    assert (summary.turns, summary.tool_calls, summary.failure) == (2, 1, "")
    multi = rollout(0)
    output = multi["response"]["output"]
    output[:0] = [{"type": "reasoning", "summary": []}]  # reasoning and the call are one turn
    output += [{"type": "message", "role": "user", "content": "and Rome?"}, *output[1:]]
    summary = summarize(json.dumps(multi).encode())
    assert (summary.turns, summary.tool_calls) == (4, 2)


def test_a_row_with_unexpected_field_types_is_still_a_row() -> None:
    odd = rollout(1, reward="high", agent="x") | {"agent_ref": ["x"], "_ng_task_index": "one"}
    odd["response"]["output"].append("not an item")
    summary = summarize(json.dumps(odd).encode())
    assert (summary.reward, summary.agent, summary.task, summary.tool_calls, summary.turns) == (
        None,
        "",
        None,
        1,
        2,
    )
    with pytest.raises(NotARow, match="not an object"):
        summarize(b"[1, 2]")
    with pytest.raises(NotARow, match="truncated"):
        summarize(b'{"reward": 1.0, "resp')


def test_bad_lines_are_skipped_by_number_and_good_rows_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", rollout(0), "{not json", "", rollout(1), "[1]", json.dumps(rollout(2))[:40],
                 end="")  # fmt: skip
    index = indexed(path)
    assert index.rows == 2 and list(index.lines) == [1, 4]
    assert [(s.line, s.reason.split(" (")[0]) for s in index.skipped] == [
        (2, "not JSON"), (5, "a JSON list, not an object"), (6, "truncated JSON")]  # fmt: skip
    assert "without a newline" in index.skipped[-1].reason
    assert json.loads(index.read(1)) == rollout(1)


def test_only_so_many_skipped_lines_are_named(tmp_path: Path) -> None:
    index = indexed(write(tmp_path / "r.jsonl", *["oops"] * 5, rollout(0)), ViewLimits(skipped_listed=2))
    assert (index.rows, index.skipped_count, [s.line for s in index.skipped]) == (1, 5, [1, 2])


def test_a_growing_file_is_indexed_further_and_a_half_written_row_completes(tmp_path: Path) -> None:
    whole = json.dumps(rollout(1))
    path = write(tmp_path / "r.jsonl", rollout(0), whole[:30], end="")
    index = indexed(path)
    assert (index.rows, index.skipped_count) == (1, 1)
    with open(path, "a") as file:
        file.write(whole[30:] + "\n" + json.dumps(rollout(2)) + "\n")
    assert index.refresh() is True
    assert (index.rows, index.skipped_count, index.skipped) == (3, 0, [])
    assert [json.loads(index.read(row))["_ng_task_index"] for row in range(3)] == [0, 1, 2]
    assert index.refresh() is False


def test_a_replaced_file_is_indexed_again(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", rollout(0), rollout(1))
    index = indexed(path)
    write(tmp_path / "new.jsonl", rollout(7, agent="other")).replace(path)
    index.refresh()
    assert (index.rows, index.agents) == (1, ["other"])


def test_reading_a_row_of_a_file_rewritten_in_place_says_so(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", rollout(0), rollout(1))
    index = indexed(path)
    with open(path, "r+b") as file:  # same inode, other content, not refreshed yet
        file.write(b"x" * index.starts[1] + b"garbage")
    with pytest.raises(FileChanged, match="changed since it was indexed"):
        index.read(1)


def test_filters_match_agent_failure_outcome_and_inclusive_reward_bounds(tmp_path: Path) -> None:
    rows = [rollout(0, 0.0), rollout(1, 0.5, agent="b"), rollout(2, 1.0), rollout(3, None),
            rollout(4, 0.0, _ng_failure_class="judge_failed"), rollout(5, 0.0, agent="b", _ng_failure_class="no_worker")]  # fmt: skip
    index = indexed(write(tmp_path / "r.jsonl", *rows))
    assert index.select(Query()) == [0, 1, 2, 3, 4, 5]
    assert index.select(Query(agent="b")) == [1, 5]
    assert index.select(Query(agent="nobody")) == []
    assert index.select(Query(reward_min=0.5, reward_max=1.0)) == [1, 2]
    assert index.select(Query(reward_min=1.0, reward_max=1.0)) == [2]
    assert index.select(Query(reward_max=0.0)) == [0, 4, 5]  # no reward fails any bound
    assert index.select(Query(outcome="failed")) == [4, 5]
    assert index.select(Query(outcome="ok", agent="weather_agent")) == [0, 2, 3]
    assert index.select(Query(failure="judge_failed")) == [4]
    assert index.summary(3) == [3, 4, None, 0, 3, 0, 2, 1, 0]


def test_histograms_count_each_agents_rewards(tmp_path: Path) -> None:
    rows = [rollout(0, 0.0), rollout(1, 1.0), rollout(2, 1.0, agent="b"), rollout(3, None, agent="b")]
    histogram = indexed(write(tmp_path / "r.jsonl", *rows)).histogram()
    assert histogram["bins"] == [{"lo": 0.0, "hi": 0.0}, {"lo": 1.0, "hi": 1.0}]
    assert histogram["agents"] == [{"agent": "weather_agent", "counts": [1, 1], "no_reward": 0},
                                   {"agent": "b", "counts": [0, 1], "no_reward": 1}]  # fmt: skip
    spread = indexed(write(tmp_path / "s.jsonl", *[rollout(i, i / 19) for i in range(20)])).histogram()
    assert len(spread["bins"]) == 10 and spread["bins"][0]["lo"] == 0.0 and spread["bins"][-1]["hi"] == 1.0
    assert spread["agents"][0]["counts"] == [2] * 10
