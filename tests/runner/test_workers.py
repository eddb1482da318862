"""The one owner of the worker processes a command starts (`runner._workers`): a process
that exits is replaced, and one that keeps exiting as it starts is given up on, said why.
Real `gym-runner serve` processes, told to serve a function that does not exist (so each
exits as it starts, with a message)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from gymbus.bus import ServeOptions
from gymbus.runner._workers import WorkerProcesses, start_limit
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS


def test_a_group_whose_processes_exit_as_they_start_is_replacing_then_given_up_on(tmp_path: Path) -> None:
    timeouts = replace(DEFAULT_TIMEOUTS, worker_restart=0.1, worker_restart_most=0.2)
    options = ServeOptions(
        functions=("no_such_function",),
        timeouts=timeouts,
        limits=replace(DEFAULT_LIMITS, worker_failed_starts=2),
    )
    group = WorkerProcesses(options, "nats://127.0.0.1:9", tmp_path / "workers.log")
    group.start()
    try:
        group.children[0].wait(60)
        assert group.replacing()  # exited, not noticed yet: a replacement is coming
        deadline = time.monotonic() + 60
        while not group.failed:
            assert time.monotonic() < deadline, (tmp_path / "workers.log").read_text()
            group.poll()
            time.sleep(0.05)
    finally:
        group.stop(5)
    assert group.restarts == 1 and not group.replacing()
    assert "exited 2 times in a row as they started" in group.failed
    assert "no_such_function" in group.failed  # the log's last line says why


def test_workers_hosting_nemo_gym_servers_get_as_long_to_start_as_nemo_gym_gives_them() -> None:
    """A worker serves a NeMo Gym server's functions once that server answers, which NeMo
    Gym waits 600 s for (`server_spinup_timeout_seconds`): a command waiting for its own
    workers allows that on top of their own start; for other functions, their start only."""
    timeouts = replace(DEFAULT_TIMEOUTS, worker_start=30.0)
    hosting = WorkerProcesses(ServeOptions(functions=("nemo-gym:mcqa", "vllm")), "nats://127.0.0.1:9", None)
    own = WorkerProcesses(ServeOptions(functions=("example_single_tool_call",)), "nats://127.0.0.1:9", None)
    assert DEFAULT_TIMEOUTS.nemo_gym_start == 600.0
    assert start_limit(hosting, timeouts) == 630.0
    assert start_limit(own, timeouts) == 30.0
