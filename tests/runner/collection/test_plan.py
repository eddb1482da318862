"""Numbering rollouts as NeMo Gym does, and naming file, line and field for bad rows."""

from __future__ import annotations

import json
from pathlib import Path

from gymbus.runner import BadRow, Plan, PlannedRollout

ROW = {"responses_create_params": {"input": "q1"}}


def write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


async def items(path: Path, **options: object) -> tuple[Plan, list[PlannedRollout | BadRow]]:
    plan = await Plan.scan(path, **options)  # type: ignore[arg-type]
    return plan, [item async for item in plan.rollouts()]


def keys(found: list[PlannedRollout | BadRow]) -> list[tuple[int, int]]:
    return [(item.task_index, item.rollout_index) for item in found if isinstance(item, PlannedRollout)]


async def test_repeats_are_consecutive_and_indexed(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", ROW, {"responses_create_params": {"input": "q2"}})
    plan, found = await items(path, num_repeats=3, default_agent="a")
    assert keys(found) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [item.seq for item in found] == list(range(6))
    assert plan.total == 6 and plan.agents == {"a": 6}


async def test_identical_lines_share_a_task_index_and_continue_its_rollouts(tmp_path: Path) -> None:
    other = {"responses_create_params": {"input": "other"}}
    path = write(tmp_path / "in.jsonl", ROW, other, ROW)
    _, found = await items(path, num_repeats=2, default_agent="a")
    assert keys(found) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]


async def test_a_row_s_own_task_index_is_kept(tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.jsonl", {**ROW, "_ng_task_index": 41}, {"responses_create_params": {"input": "x"}}
    )
    _, found = await items(path, default_agent="a")
    assert keys(found) == [(41, 0), (0, 0)]


async def test_stamps_keep_the_row_s_other_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", {**ROW, "expected_answer": "B", "agent_ref": {"name": "mine"}})
    _, [item] = await items(path, default_agent="fallback")
    assert isinstance(item, PlannedRollout) and item.agent == "mine"
    row = json.loads(item.body)
    assert row["expected_answer"] == "B" and row["agent_ref"] == {"name": "mine"}
    assert (row["_ng_task_index"], row["_ng_rollout_index"]) == (0, 0)


async def test_agent_flag_fills_only_missing_agent_refs(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", ROW)
    _, [item] = await items(path, default_agent="fallback")
    assert isinstance(item, PlannedRollout)
    assert json.loads(item.body)["agent_ref"] == {"type": "responses_api_agents", "name": "fallback"}


async def test_limit_counts_input_rows_before_repeats(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", *({"responses_create_params": {"input": f"q{i}"}} for i in range(10)))
    plan, found = await items(path, limit=3, num_repeats=2, default_agent="a")
    assert plan.total == 6 and len(found) == 6


async def test_bad_rows_name_file_line_and_field_and_do_not_sink_good_ones(tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.jsonl",
        ROW,
        "{not json",
        {"expected_answer": "B"},
        {"responses_create_params": {"input": "q", "temperature": "hot"}},
        {"responses_create_params": {"input": 5}},
        {"responses_create_params": {"input": "q", "bogus": 1}},
        {"responses_create_params": {"input": "q"}, "_ng_task_index": "seven"},
        {"responses_create_params": {"input": "last"}},
    )
    plan, found = await items(path, default_agent="a")
    bad = {item.line: str(item.error) for item in found if isinstance(item, BadRow)}
    assert sorted(bad) == [2, 3, 4, 5, 6, 7]
    assert bad[2].startswith(f"{path}:2: not a JSON object")
    assert bad[3] == f"{path}:3: field `responses_create_params`: missing (every row needs it)"
    assert "field `responses_create_params.temperature`" in bad[4] and "Expected `float | null`" in bad[4]
    assert "field `responses_create_params.input`" in bad[5]
    assert "unknown field `bogus`" in bad[6]
    assert "field `_ng_task_index`" in bad[7]
    assert keys(found) == [(0, 0), (1, 0)]
    assert plan.total == 8


async def test_a_row_without_any_agent_is_bad(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", ROW)
    _, [item] = await items(path)
    assert isinstance(item, BadRow) and "field `agent_ref`: missing, and no --agent was given" in str(
        item.error
    )


async def test_blank_lines_are_skipped_but_numbered(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(ROW) + "\n\n" + "{bad\n")
    _, found = await items(path, default_agent="a")
    assert [item.line for item in found] == [1, 3]


async def test_a_row_nested_too_deep_is_one_bad_row_not_a_crash(tmp_path: Path) -> None:
    deep = '{"responses_create_params": {"input": "q"}, "x": ' + "[" * 1000 + "]" * 1000 + "}"
    path = write(tmp_path / "in.jsonl", ROW, deep, ROW)
    plan, found = await items(path, default_agent="a")
    assert plan.total == 3 and plan.bad_lines == {2}
    [bad] = [item for item in found if isinstance(item, BadRow)]
    assert str(bad.error) == f"{path}:2: nested deeper than 128 levels"
