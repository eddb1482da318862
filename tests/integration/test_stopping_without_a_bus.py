"""A process told to stop after its nats-server went away for good stops within the
reconnect window (`Timeouts.reconnect_window`) and a few seconds: a pod or compose shutdown
stops the server and the workers at once, and nothing the process still holds can finish
without the bus. A collection says how to resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbus import bus
from gymbus.schemas import DEFAULT_TIMEOUTS

from .busy_functions import BUSY
from .test_nemo_gym import built

ROOT = Path(__file__).resolve().parents[2]
WEATHER = ("example_single_tool_call", "example_single_tool_call_simple_agent", "offline")
SOON = DEFAULT_TIMEOUTS.reconnect_window + 6.0
"""How long a process may take to stop once told, its bus gone: the window and a few seconds
(the machine may be busy)."""

pytestmark = pytest.mark.timeout(600)


class Processes:
    """Processes a test starts, killed when it ends (also when it fails)."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "tests.integration.busy_functions", *args]
        with open(self.workdir / log, "wb") as out:
            process = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.started.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.workdir / name).read_text(errors="replace")

    def wait_for(self, name: str, text: str, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            assert process.poll() is None, f"exited early:\n{self.log(name)[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout:g} s:\n{self.log(name)[-3000:]}"
            time.sleep(0.1)

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[bus.EmbeddedServer]:
    running = bus.EmbeddedServer(store_dir=tmp_path / "jetstream")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def processes(tmp_path: Path, server: bus.EmbeddedServer) -> Iterator[Processes]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    started = Processes(tmp_path, {**clean, "NATS_URL": server.url, "PYTHONPATH": path})
    try:
        yield started
    finally:
        started.kill_all()


def stopped_within(process: subprocess.Popen[bytes]) -> float:
    """Seconds `process` takes to exit after one SIGTERM (at most `SOON` plus a minute)."""
    told = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(SOON + 60)
    except subprocess.TimeoutExpired:
        pass
    return time.monotonic() - told


def start_collecting(processes: Processes, workdir: Path, rollouts: int = 8) -> subprocess.Popen[bytes]:
    """A collection of `rollouts` of the `burning` environment, and its worker; returns
    the worker once rollouts are in progress (a verify computing)."""
    burning = BUSY[0]
    worker = processes.start(["serve", burning.name, *burning.agents, "offline"], "worker.log")
    processes.wait_for("worker.log", "ready:", worker)
    rows = workdir / "rows.jsonl"
    row = {"responses_create_params": {"input": "compute"}, "agent_ref": {"name": burning.agents[0]}}
    rows.write_text(json.dumps(row) + "\n")
    output = workdir / "out.jsonl"
    collect = ["collect", "-i", str(rows), "-o", str(output), "--num-repeats", str(rollouts)]
    processes.start(collect, "collect.log")
    processes.wait_for("worker.log", "burning: verifying", worker)
    return worker


def test_an_idle_worker_whose_server_is_gone_stops_soon_after_one_sigterm(
    server: bus.EmbeddedServer, processes: Processes
) -> None:
    worker = processes.start(["serve", *WEATHER], "worker.log")
    processes.wait_for("worker.log", "ready:", worker)
    server.kill()  # and at once SIGTERM, as a pod's shutdown does
    took = stopped_within(worker)
    assert took < SOON, f"stopped after {took:.1f} s:\n{processes.log('worker.log')[-3000:]}"


def test_a_hosted_nemo_gym_server_whose_bus_is_gone_stops_soon_after_one_sigterm(
    server: bus.EmbeddedServer, processes: Processes
) -> None:
    built(["mcqa"])
    worker = processes.start(["serve", "nemo-gym:mcqa"], "worker.log")
    processes.wait_for("worker.log", "ready:", worker, timeout=400)
    server.kill()  # and at once SIGTERM, as a pod's shutdown does
    took = stopped_within(worker)
    assert took < SOON, f"stopped after {took:.1f} s:\n{processes.log('worker.log')[-3000:]}"


def test_a_busy_worker_whose_server_is_gone_stops_soon_after_one_sigterm(
    server: bus.EmbeddedServer, processes: Processes, tmp_path: Path
) -> None:
    worker = start_collecting(processes, tmp_path)
    server.kill()
    processes.wait_for("worker.log", "lost the connection", worker, timeout=30)
    took = stopped_within(worker)
    assert took < SOON, f"stopped after {took:.1f} s:\n{processes.log('worker.log')[-3000:]}"


def test_a_collection_whose_server_is_gone_stops_soon_after_one_sigterm_and_says_how_to_resume(
    server: bus.EmbeddedServer, processes: Processes, tmp_path: Path
) -> None:
    start_collecting(processes, tmp_path)
    collect = processes.started[-1]
    server.kill()
    processes.wait_for("collect.log", "lost the connection", collect, timeout=30)
    took = stopped_within(collect)
    log = processes.log("collect.log")
    assert took < SOON, f"stopped after {took:.1f} s:\n{log[-3000:]}"
    assert collect.returncode == 143, log[-3000:]
    assert "--resume" in log
