"""`--resume` with results an interrupted run left on the bus, and a window smaller than them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import faults
from bench._cluster import WEATHER, WEATHER_AGENT, Cluster, count_lines, tally, wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, ack_wait=2.0) as running:
        yield running


def test_results_left_on_the_bus_are_written_by_a_resume_with_a_small_window(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_worker(WEATHER, WEATHER_AGENT, "offline")
    source, args, keys = faults.weather_tasks(tmp_path, 2000)
    out = tmp_path / "out.jsonl"
    runner = cluster.collect(source, out, *args, "--concurrency", "256")
    wait_until(lambda: count_lines(out) >= 100 or runner.poll() is not None, 60, "100 rollouts")
    assert runner.poll() is None, "the run ended before it could be interrupted"
    cluster.kill(runner)
    time.sleep(1.0)  # the rollouts in flight finish; their results wait on the bus
    assert tally(out, keys).written < len(keys)
    resumed = cluster.collect(source, out, *args, "--resume", "--concurrency", "4")
    faults.finish(resumed, cluster)
    result = tally(out, keys)
    assert (result.lost, result.duplicated, result.failed, result.written) == (0, 0, 0, len(keys))


def test_the_same_collection_run_afresh_on_a_shared_bus_collects_every_rollout_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A fresh run gets a fresh run id: the same arguments again, its files deleted, must not
    repeat the earlier run's task message ids, which JetStream would drop as duplicates."""
    cluster.start_worker(WEATHER, WEATHER_AGENT, "offline")
    source, args, keys = faults.weather_tasks(tmp_path, 200)
    out = tmp_path / "out.jsonl"
    faults.finish(cluster.collect(source, out, *args), cluster)
    first = tally(out, keys)
    for written in tmp_path.glob("out*"):
        written.unlink()
    faults.finish(cluster.collect(source, out, *args), cluster)
    again = tally(out, keys)
    assert (first.written, again.written) == (len(keys), len(keys))
    assert (again.lost, again.duplicated, again.failed) == (0, 0, 0)
