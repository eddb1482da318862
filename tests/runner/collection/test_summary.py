"""What `collect` prints when it ends, and its exit status."""

from __future__ import annotations

import json
from pathlib import Path

from gymbus.runner import CollectResult
from gymbus.runner._metrics import Metrics
from gymbus.runner._output import OutputPaths
from gymbus.runner.collection._sink import FailureTally
from gymbus.runner.collection._summary import ExitCode, agent_lines, exit_code, failure_lines, result_line
from gymbus.schemas import row_fields

MCQA = "mcqa_simple_agent"


def result(
    written: int, failed: int, planned: int, metrics: Metrics | None = None, **more: object
) -> CollectResult:
    return CollectResult(
        paths=OutputPaths.for_output(Path("out.jsonl")), planned=planned, written=written, failed=failed,
        skipped=0, seconds=9.0, metrics=metrics or Metrics(task_metrics={}), collecting=2.0, **more,  # type: ignore[arg-type]
    )  # fmt: skip


def failure(failure_class: str, message: str) -> dict[str, object]:
    return {"reward": 0.0, "_ng_failure_class": failure_class, "_ng_failure_message": message}


def test_exit_status_says_whether_everything_nothing_or_some_was_collected() -> None:
    assert exit_code(result(5, 0, 5)) == ExitCode.OK == 0
    assert exit_code(result(3, 2, 5)) == ExitCode.SOME_FAILED == 3
    assert exit_code(result(0, 5, 5)) == ExitCode.NONE_COLLECTED == 4  # e.g. no worker serves the agent
    assert exit_code(result(0, 0, 0)) == ExitCode.NONE_COLLECTED  # an input without a single row
    assert exit_code(result(2, 0, 5, done_before=3)) == ExitCode.OK  # --resume completed the file


def test_the_rate_is_the_progress_bars_and_absent_when_nothing_was_collected() -> None:
    line = result_line(result(90, 10, 100))
    assert line == "Collected 90 rollouts of 100 planned in 2.0 s (50 rollouts/s); 10 failures"
    assert result_line(result(0, 5, 5)) == "Collected no rollouts of 5 planned; 5 failures"
    assert result_line(result(1, 1, 2)).endswith("; 1 failure")


def test_failures_are_listed_by_class_with_the_first_message_of_each() -> None:
    tally = FailureTally()
    for row in [failure("no_worker", "no worker serves gym.agent.x.run")] * 3 + [
        failure("invalid_input", "in.jsonl:4: not a JSON object"),
        failure("no_worker", "a later message"),
    ]:
        tally.add(row_fields(json.dumps(row).encode()))
    assert failure_lines(result(0, 5, 5, failures=tally)) == [
        "  no_worker: 4 (first: no worker serves gym.agent.x.run)",
        "  invalid_input: 1 (first: in.jsonl:4: not a JSON object)",
    ]


def test_the_console_shows_reward_and_the_environments_metrics_rounded_not_every_mean() -> None:
    metrics = Metrics()  # mcqa declares pass@k metrics
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]  # 4 of 6: 66.666...%
    for task, reward in enumerate(rewards):
        row = {"reward": reward, "id": 23561 + task, "minefield_label_value": 3, "extracted_answer": "A",
               "_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": MCQA}}  # fmt: skip
        metrics.add(MCQA, row_fields(json.dumps(row).encode()))
    [line] = agent_lines(result(6, 0, 6, metrics))
    assert line.startswith(f"{MCQA}: 6 rollouts, mean reward 0.667; ")
    assert "id" not in line.replace("avg", "") and "minefield" not in line  # input fields are no metric
    assert "accuracy pass@1 66.7%" in line  # once, labelled as percent, rounded
    assert line.count("66.7") == 1


def test_agreeing_metrics_are_named_together_at_higher_k() -> None:
    metrics = Metrics()
    for task in range(3):
        for rollout in range(2):
            row = {
                "reward": 1.0,
                "extracted_answer": "B",
                "_ng_task_index": task,
                "_ng_rollout_index": rollout,
            }
            metrics.add(MCQA, row_fields(json.dumps(row).encode()))
    [line] = agent_lines(result(6, 0, 6, metrics))
    assert "accuracy pass@1[avg-of-2] = majority@2 = pass@1 100.0%" in line


def test_restarted_rollouts_are_said_in_the_summary_and_per_agent() -> None:
    metrics = Metrics(task_metrics={})
    stats = {"restarts": 2, "delivery": 2}
    metrics.add(MCQA, row_fields(json.dumps({"reward": 1.0, "_gymbus": stats}).encode()))
    said = "; 2 restarts (rollouts started over, model calls paid again)"
    assert result_line(result(1, 0, 1, metrics)).endswith(said)
    assert "2 restarted, 1 redelivered" in agent_lines(result(1, 0, 1, metrics))[0]
    assert "restart" not in result_line(result(1, 0, 1))
