"""Processes a benchmark starts, and their CPU time and memory, summed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import psutil

from gymbus import bus

RUNNER = [sys.executable, "-m", "gymbus.runner"]
BENCH = [sys.executable, "-m", "bench"]
WEATHER = "example_single_tool_call"
WEATHER_AGENT = "example_single_tool_call_simple_agent"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / f"{WEATHER}.jsonl"


class Fleet:
    """A nats-server and the processes started against it; CPU and RSS over all of them."""

    def __init__(self) -> None:
        self.server = bus.EmbeddedServer()
        self.url = ""
        self.children: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Self:
        self.url = self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_children()
        self.server.stop()

    def stop_children(self) -> None:
        """SIGTERM every child, and SIGKILL one still running 15 s later."""
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()

    def env(self) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("POLICY_BASE_URL",)}
        return {**clean, "NATS_URL": self.url}

    def spawn(self, command: list[str], ready: str | None = "ready:") -> subprocess.Popen[bytes]:
        """Start `command`; if `ready` is given, wait until it prints a line starting so."""
        child = subprocess.Popen(
            command, env=self.env(), stdout=subprocess.PIPE if ready else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.children.append(child)
        if ready:
            assert child.stdout is not None
            for line in child.stdout:
                if line.decode(errors="replace").startswith(ready):
                    break
            else:
                raise RuntimeError(f"{command} exited before it was ready")
        return child

    def processes(self) -> list[psutil.Process]:
        pids = [self.server._process.pid] if self.server._process else []
        pids += [child.pid for child in self.children if child.poll() is None]
        found = []
        for pid in pids:
            try:
                found.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        return found


def _summed(processes: list[psutil.Process], measure: Callable[[psutil.Process], float]) -> float:
    """`measure` summed over `processes`, skipping any that exited meanwhile."""
    total = 0.0
    for process in processes:
        try:
            total += measure(process)
        except psutil.NoSuchProcess:
            pass
    return total


def cpu_seconds(processes: list[psutil.Process]) -> float:
    def busy(process: psutil.Process) -> float:
        times = process.cpu_times()
        return float(times.user + times.system)

    return _summed(processes, busy)


def rss_bytes(processes: list[psutil.Process]) -> int:
    return int(_summed(processes, lambda p: p.memory_info().rss))


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


class Sampler:
    """Polls a running command: peak RSS of a process set, CPU time, output lines."""

    def __init__(self, runner: subprocess.Popen[bytes], others: list[psutil.Process], output: Path) -> None:
        self.runner = runner
        self.runner_process = psutil.Process(runner.pid)
        self.others = others
        self.output = output
        self.peak_rss = 0
        self.peak_runner_rss = 0
        self.runner_cpu = 0.0
        self.first_line_at: float | None = None
        self.started = time.monotonic()

    def run(self, interval: float = 0.05) -> None:
        """Until the runner exits; its exact CPU time comes from the kernel when it does."""
        while True:
            pid, status, usage = os.wait4(self.runner.pid, os.WNOHANG)
            if pid:
                self.runner.returncode = os.waitstatus_to_exitcode(status)
                self.runner_cpu = usage.ru_utime + usage.ru_stime
                break
            try:
                runner_rss = self.runner_process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            self.peak_runner_rss = max(self.peak_runner_rss, runner_rss)
            self.peak_rss = max(self.peak_rss, runner_rss + rss_bytes(self.others))
            if self.first_line_at is None and self.output.exists() and self.output.stat().st_size:
                self.first_line_at = time.monotonic()
            time.sleep(interval)
        self.finished_at = time.monotonic()


def stop_ng_run(process: subprocess.Popen[bytes]) -> None:
    """`ng_run` (started in a process group of its own) and everything it started: Ctrl-C,
    as its user stops it (it stops its servers and Ray), then the whole group, also where
    `ng_run` exited by itself (a server it lost at start leaves the others running)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
