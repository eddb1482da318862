"""pass@k, pass@1[avg-of-k] and majority@k on hand-built groups, worked out by hand."""

from __future__ import annotations

import math

import pytest

from gymbus.functions.environments._pass_k import (
    Scored,
    answer_digest,
    highest_k,
    pass_majority,
    per_task_summary,
)


def rollout(accuracy: float, answer: str | None) -> Scored:
    return Scored({"accuracy": accuracy}, answer_digest(answer))


# Task 0: right, wrong, right, wrong (answers A, B, A, C). Task 1: all wrong; no answer first.
TASKS = [
    [rollout(1, "A"), rollout(0, "B"), rollout(1, "A"), rollout(0, "C")],
    [rollout(0, None), rollout(0, "B"), rollout(0, "B"), rollout(0, "D")],
]


def test_pass_at_k_is_the_unbiased_estimator_averaged_over_tasks() -> None:
    metrics = pass_majority(TASKS)
    assert metrics["pass@1/accuracy"] == pytest.approx(100 * (0.5 + 0.0) / 2)  # 1 - C(2,1)/C(4,1)
    assert metrics["pass@2/accuracy"] == pytest.approx(100 * (1 - 1 / 6) / 2)  # 1 - C(2,2)/C(4,2)
    assert metrics["pass@3/accuracy"] == pytest.approx(50.0)  # two wrong < 3: certain
    assert metrics["pass@4/accuracy"] == pytest.approx(50.0)


def test_pass_at_1_avg_of_k_is_the_mean_of_the_first_k() -> None:
    metrics = pass_majority(TASKS)
    assert metrics["pass@1[avg-of-1]/accuracy"] == pytest.approx(50.0)
    assert metrics["pass@1[avg-of-2]/accuracy"] == pytest.approx(25.0)
    assert metrics["pass@1[avg-of-3]/accuracy"] == pytest.approx(100 * (2 / 3) / 2)


def test_majority_at_k_votes_among_answered_rollouts_and_splits_ties() -> None:
    metrics = pass_majority(TASKS)
    assert metrics["majority@1/accuracy"] == pytest.approx(50.0)  # task 1's first has no answer: 0
    assert metrics["majority@2/accuracy"] == pytest.approx(25.0)  # A (right) ties B (wrong): 0.5
    assert metrics["majority@4/accuracy"] == pytest.approx(50.0)  # A twice wins task 0


def test_no_answer_is_scored_like_any_other_binary_score() -> None:
    metrics = pass_majority(TASKS)
    assert metrics["pass@1/no_answer"] == pytest.approx(100 * (0 + 1 / 4) / 2)
    assert metrics["pass@1[avg-of-1]/no_answer"] == pytest.approx(50.0)
    assert "no_answer" not in str(sorted(pass_majority(TASKS, with_answers=False)))


def test_spread_across_runs() -> None:
    metrics = pass_majority(TASKS)
    assert metrics["per_sample_aggregate"]["accuracy"] == [50.0, 0.0, 50.0, 0.0]
    assert metrics["pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == pytest.approx(math.sqrt(1250))
    assert metrics["pass@1[avg-of-2]/accuracy/std_err_across_runs"] == pytest.approx(25.0)
    assert metrics["pass@1[avg-of-4]/accuracy/std_dev_across_runs"] == pytest.approx(math.sqrt(2500 / 3))
    assert "pass@1[avg-of-1]/accuracy/std_dev_across_runs" not in metrics


def test_continuous_scores_take_the_best_of_the_first_k() -> None:
    metrics = pass_majority([[Scored({"score": 0.5}), Scored({"score": 1.0}), Scored({"score": 0.0})]])
    assert (metrics["pass@1/score"], metrics["pass@2/score"]) == (50.0, 100.0)


def test_tasks_with_fewer_rollouts_are_left_out_of_larger_k() -> None:
    metrics = pass_majority([[rollout(1, "A")], [rollout(0, "B"), rollout(0, "B"), rollout(1, "C")]])
    assert metrics["pass@1/accuracy"] == pytest.approx(100 * (1 + 1 / 3) / 2)
    assert metrics["pass@3/accuracy"] == pytest.approx(100.0)  # only the second task has 3


def test_no_tasks_no_metrics() -> None:
    assert pass_majority([]) == {}


def test_highest_k_picks_the_largest_k_and_never_spread_statistics() -> None:
    metrics = pass_majority(TASKS)
    assert highest_k(metrics, "pass@1[avg-of-{k}]", only=("accuracy",)) == {
        "pass@1[avg-of-4]/accuracy": metrics["pass@1[avg-of-4]/accuracy"]
    }
    assert set(highest_k(metrics, "pass@{k}", exclude=("no_answer",))) == {"pass@4/accuracy"}
    assert highest_k({}, "majority@{k}") == {}


def test_per_task_summary_is_the_tasks_own_highest_k_metrics() -> None:
    assert per_task_summary(TASKS[0]) == {
        "pass@4/accuracy": 100.0,
        "pass@4/no_answer": 0.0,
        "pass@1[avg-of-4]/accuracy": 50.0,
        "pass@1[avg-of-4]/no_answer": 0.0,
        "majority@4/accuracy": 100.0,
        "majority@4/no_answer": 0.0,
    }


def test_answers_compare_by_digest() -> None:
    assert answer_digest("B") == answer_digest("B") != answer_digest("C")
    assert answer_digest(None) is None
