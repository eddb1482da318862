"""Stopping `gym-runner collect` as a terminal does: the signal goes to the whole process group.

Each test starts `collect` on the embedded default (its own nats-server and workers) as the
leader of a new process group, as a shell starts a foreground job, and signals the group.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench import faults
from bench._cluster import count_lines, tally, wait_until
from tests.integration.test_collect import left_running

pytestmark = pytest.mark.timeout(120)

TASKS = 3000


class Job:
    """A foreground job: `gym-runner collect` leading its own process group."""

    def __init__(self, tmp_path: Path, *extra: str, prefix: tuple[str, ...] = (), tasks: int = TASKS) -> None:
        self.tasks = tasks
        self.source, args, self.keys = faults.weather_tasks(tmp_path, tasks)
        self.out = tmp_path / "out.jsonl"
        self.log = tmp_path / "job.log"
        env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
        command = [
            sys.executable,
            "-m",
            "gymbus.runner",
            "collect",
            "-i",
            str(self.source),
            "-o",
            str(self.out),
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*prefix, *command, *args, "--concurrency", "16", *extra],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_for_lines(self, lines: int) -> None:
        wait_until(lambda: count_lines(self.out) >= lines or self.process.poll() is not None, 60, "rollouts")
        assert self.process.poll() is None, f"the run ended before the signal:\n{self.text()}"

    def signal_group(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"collect did not stop within {timeout} s of the signal:\n{self.text()[-2000:]}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def bus_url(self) -> str:
        found = re.search(r"started embedded nats-server at (nats://\S+)", self.text())
        assert found is not None, self.text()
        return found.group(1)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.kill()


def consistent(job: Job) -> faults.Tally:
    """Whole lines, each key once, no failure: what an interrupted run may leave."""
    assert job.out.read_bytes().endswith(b"\n")
    assert all(json.loads(line) for line in job.out.read_text().splitlines())
    result = tally(job.out, job.keys)
    assert (result.duplicated, result.failed) == (0, 0), result
    return result


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_signal_to_the_group_finishes_the_rollouts_in_flight(
    tmp_path: Path, jobs: list[Job], signum: int, code: int
) -> None:
    job = Job(tmp_path)
    jobs.append(job)
    job.wait_for_lines(300)
    job.signal_group(signum)
    assert job.wait(30) == code
    assert "lost the connection to NATS" not in job.text()
    partial = consistent(job)
    assert 300 <= partial.written < TASKS
    assert left_running(job.bus_url()) == []  # the server and the workers stopped with it
    resumed = Job(tmp_path, "--resume")
    jobs.append(resumed)
    assert resumed.wait(60) == 0, resumed.text()
    result = consistent(resumed)
    assert (result.lost, result.written) == (0, TASKS)


def test_a_second_signal_to_the_group_stops_at_once(tmp_path: Path, jobs: list[Job]) -> None:
    job = Job(tmp_path, "--rollout-timeout", "3600")
    jobs.append(job)
    job.wait_for_lines(300)
    job.signal_group(signal.SIGINT)
    wait_until(lambda: "again to stop now" in job.text() or job.process.poll() is not None, 10, "the note")
    job.signal_group(signal.SIGINT)
    assert job.wait(15) == 130
    consistent(job)
    assert left_running(job.bus_url()) == []


def test_timeout_sending_sigint_stops_it_like_one_ctrl_c(tmp_path: Path, jobs: list[Job]) -> None:
    # `timeout` signals the command, then its whole process group: one request to stop, not two.
    # 20 s: time for the workers to start on a busy machine; more tasks than any machine finishes.
    job = Job(tmp_path, prefix=("timeout", "-s", "INT", "20"), tasks=200_000)
    jobs.append(job)
    assert job.wait(60) == 124  # timeout's own code: it timed out, and its command then exited
    assert "stopping: finishing the rollouts in flight" in job.text()
    assert "stopped; rollouts written so far" not in job.text()  # not taken for a second Ctrl-C
    assert "interrupted" in job.text()
    partial = consistent(job)
    assert 0 < partial.written < job.tasks
    assert left_running(job.bus_url()) == []


def test_a_run_whose_embedded_server_dies_stops_with_an_error_instead_of_waiting(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path)
    jobs.append(job)
    job.wait_for_lines(300)
    [server] = [p for p in psutil.Process(job.process.pid).children() if p.name() == "nats-server"]
    server.kill()
    assert job.wait(30) == 1
    assert "error: the embedded nats-server exited with code -9" in job.text()
    consistent(job)
