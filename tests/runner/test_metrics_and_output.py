"""Aggregate metrics in NeMo Gym's shape; output files named and resumed as NeMo Gym's."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest

from gymbus.functions import TaskMetrics
from gymbus.runner._metrics import FieldStats, Metrics, builtin_task_metrics, numeric_fields
from gymbus.runner._output import OutputPaths, _cut_partial_line, read_progress
from gymbus.schemas import row_fields


def row(reward: float, tokens: int) -> bytes:
    return json.dumps(
        {"reward": reward, "_ng_task_index": 1, "ok": True, "label": "x",
         "response": {"usage": {"input_tokens": tokens, "output_tokens": 1}}}
    ).encode()  # fmt: skip


def test_numeric_fields_are_top_level_numbers_and_usage_counts() -> None:
    assert numeric_fields(row_fields(row(0.5, 7))) == {
        "reward": 0.5,
        "input_tokens": 7.0,
        "output_tokens": 1.0,
    }


def test_aggregate_matches_nemo_gym_shape_and_values() -> None:
    metrics = Metrics(task_metrics={})  # the generic metrics only
    for reward, tokens in ((1.0, 10), (0.0, 20), (1.0, 30)):
        metrics.add("mcqa_simple_agent", row_fields(row(reward, tokens)))
    [entry] = metrics.aggregate()
    assert entry["agent_ref"] == {"name": "mcqa_simple_agent"}
    agent = entry["agent_metrics"]
    assert agent["mean/reward"] == pytest.approx(2 / 3)
    assert agent["std/reward"] == pytest.approx(statistics.stdev([1.0, 0.0, 1.0]))
    assert (agent["min/input_tokens"], agent["median/input_tokens"], agent["max/input_tokens"]) == (
        10,
        20,
        30,
    )
    assert set(entry["key_metrics"]) == {"mean/reward", "mean/input_tokens", "mean/output_tokens"}
    assert metrics.mean_reward == pytest.approx(2 / 3)


def test_median_stays_exact_while_the_sample_holds_every_value() -> None:
    stats = FieldStats()
    for value in range(1001):
        stats.add(float(value))
    assert stats.describe("x")["median/x"] == 500.0


def test_paths_are_derived_as_nemo_gym_derives_them() -> None:
    paths = OutputPaths.for_output(Path("results/run.jsonl"))
    assert paths.failures == Path("results/run_failures.jsonl")
    assert paths.materialized == Path("results/run_materialized_inputs.jsonl")
    assert paths.metrics == Path("results/run_aggregate_metrics.json")


async def test_resume_cuts_a_partial_last_line_and_counts_failures(tmp_path: Path) -> None:
    paths = OutputPaths.for_output(tmp_path / "out.jsonl")
    done = [{"_ng_task_index": 0, "_ng_rollout_index": r, "reward": 1.0} for r in range(2)]
    paths.rollouts.write_bytes(
        b"".join(msgspec.json.encode(d) + b"\n" for d in done) + b'{"_ng_task_index": 0, "_ng_rol'
    )
    failed = {"_ng_task_index": 5, "_ng_rollout_index": 0, "_ng_failure_class": "model_failed"}
    paths.failures.write_bytes((msgspec.json.encode(failed) + b"\n") * 2)
    metrics = Metrics()
    progressed = await read_progress(paths, metrics)
    assert progressed.done == {(0, 0), (0, 1)}
    assert progressed.failed[(5, 0)] == 2
    assert paths.rollouts.read_bytes().endswith(b"}\n")
    assert metrics.mean_reward == 1.0


def scored_row(task: int, rollout: int, reward: float, answer: str | None) -> dict[str, msgspec.Raw]:
    fields = {
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "reward": reward,
        "extracted_answer": answer,
    }
    return row_fields(json.dumps(fields).encode())


def best_of_task() -> TaskMetrics:
    """A toy environment metric: per task, its rewards in rollout order; overall, the best."""

    def project(fields: Mapping[str, msgspec.Raw]) -> float:
        return float(msgspec.json.decode(fields["reward"]))

    return TaskMetrics(
        project=project,
        compute=lambda tasks: {"best_of/reward": sum(max(t) for t in tasks) / len(tasks), "order": tasks},
        per_task=lambda rollouts: {"first": rollouts[0]},
        key_metrics=lambda metrics: {"best_of/reward": metrics["best_of/reward"]},
    )


def test_an_environments_task_metrics_join_the_agents_aggregate() -> None:
    metrics = Metrics(task_metrics={"toy_agent": best_of_task()})
    for task, rollout, reward in ((1, 1, 0.0), (0, 0, 1.0), (1, 0, 0.5), (0, 1, 0.0)):  # completion order
        metrics.add("toy_agent", scored_row(task, rollout, reward, None))
    metrics.add_failure("toy_agent")  # failures never reach the environment's metrics
    metrics.add("other_agent", scored_row(0, 0, 1.0, None))
    other, toy = metrics.aggregate()  # sorted by agent name
    assert toy["agent_metrics"]["order"] == [[1.0, 0.0], [0.5, 0.0]]  # by task, then rollout index
    assert toy["agent_metrics"]["best_of/reward"] == 0.75
    assert toy["agent_metrics"]["mean/reward"] == pytest.approx(0.375)  # the generic metrics stay
    assert toy["key_metrics"] == {"best_of/reward": 0.75}
    assert toy["group_level_metrics"] == [
        {"_ng_task_index": 0, "num_rollouts": 2, "first": 1.0},
        {"_ng_task_index": 1, "num_rollouts": 2, "first": 0.5},
    ]
    assert other["key_metrics"] == {"mean/reward": 1.0} and other["group_level_metrics"] == []


def test_built_in_environments_declare_their_task_metrics() -> None:
    hooks = builtin_task_metrics()
    assert "example_single_tool_call_simple_agent" not in hooks
    assert all(isinstance(hook, TaskMetrics) for hook in hooks.values())


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
@pytest.mark.parametrize(
    ("data", "kept"),
    [
        (b'{"a": 1}\n{"b": 2}\n{"c"', b'{"a": 1}\n{"b": 2}\n'),
        (b'{"a": 1}\n', b'{"a": 1}\n'),
        (b'{"half', b""),
        (b"x" * 100 + b"\n" + b"y" * 250, b"x" * 100 + b"\n"),
    ],
)
def test_a_partial_last_line_is_cut_reading_back_from_the_end(
    tmp_path: Path, chunk: int, data: bytes, kept: bytes
) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(data)
    _cut_partial_line(path, chunk)
    assert path.read_bytes() == kept


def test_restarts_and_redeliveries_are_counted_per_agent_and_in_all() -> None:
    metrics = Metrics(task_metrics={})
    ran = [{"restarts": 2, "delivery": 1}, {"restarts": 0, "delivery": 3}, {"restarts": 1, "delivery": 1}]
    for stats in ran[:2]:
        metrics.add("a", row_fields(json.dumps({"reward": 1.0, "_gymbus": stats}).encode()))
    failed = json.dumps({"_ng_failure_class": "tool_failed", "_gymbus": ran[2]}).encode()
    metrics.add_failure("a", row_fields(failed))
    metrics.add("b", row_fields(row(1.0, 1)))  # a row with no stats (an older run's)
    a, b = metrics.aggregate()
    assert a["gymbus"] == {"restarts": 3, "redelivered": 2}
    assert b["gymbus"] == {"restarts": 0, "redelivered": 0}
    assert metrics.restarts == 3
    assert "restart" not in a["agent_metrics"]  # NeMo Gym's own metrics are left as they are
