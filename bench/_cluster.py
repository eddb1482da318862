"""A GymBus cluster on loopback made of real processes, for fault injection.

A nats-server with file storage (restartable on its port, keeping its data), worker
processes (`gym-runner serve`) and runner processes (`gym-runner collect`) that a
scenario can SIGKILL at any moment, and a tally of what ended up in the output files.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from bench.openai_stub import free_port
from gymbus import bus, schemas

WEATHER = "example_single_tool_call"
WEATHER_AGENT = "example_single_tool_call_simple_agent"
RUNNER = [sys.executable, "-m", "gymbus.runner"]


@dataclass
class Tally:
    """What a collection wrote, against what it should have.

    fault_injected: whether the scenario's fault landed while there was work left (a
    fault after the last rollout proves nothing); `None` for a scenario without one.
    """

    expected: int
    written: int
    failed: int
    lost: int
    duplicated: int
    retried: int
    failure_classes: Counter[str] = field(default_factory=Counter)
    fault_injected: bool | None = None
    slowed: float | None = None
    """Seconds the fault cut throughput below half of what it was before (`None`: not measured)."""
    tool_errors: int = 0
    """Rollouts whose model was shown an error in place of a tool's output."""
    expected_failures: int = 0
    """Of `failed`, the failure rows the scenario asked for (bad input rows, poison tasks)."""


def tally(output: Path, expected: set[tuple[int, int]], bad_lines: Collection[int] = ()) -> Tally:
    """Count the rollouts and failures written for `expected` keys, and the failure rows
    of the input lines `bad_lines`.

    lost: expected keys (and bad lines) in neither file; duplicated: lines beyond one per
    key or bad line (in both files together); retried: model and call retries plus extra
    deliveries.
    """
    rows = _rows(output)
    failures = _rows(output.with_name(f"{output.stem}_failures.jsonl"))
    keys = Counter(
        (row["_ng_task_index"], row["_ng_rollout_index"])
        if "_ng_task_index" in row
        else row.get("_ng_input_line")
        for row in rows + failures
    )
    wanted: set[object] = {*expected, *bad_lines}
    tool_errors = sum(
        1 for row in rows if any(_is_error(item) for item in (row.get("response") or {}).get("output") or [])
    )
    retried = 0
    for row in rows + failures:
        stats = row.get("_gymbus") or {}
        retried += sum(stats.get(name, 0) for name in ("model_retries", "call_retries", "restarts"))
        retried += stats.get("delivery", 1) - 1
    return Tally(
        expected=len(wanted),
        written=len(rows),
        failed=len(failures),
        lost=len(wanted - set(keys)),
        duplicated=sum(count - 1 for count in keys.values()),
        retried=retried,
        failure_classes=Counter(str(row.get("_ng_failure_class")) for row in failures),
        tool_errors=tool_errors,
        expected_failures=len(bad_lines),
    )


def _is_error(item: dict) -> bool:  # type: ignore[type-arg]
    """Whether a response item is a tool output that only says the call failed."""
    if item.get("type") != "function_call_output":
        return False
    try:
        output = json.loads(item.get("output") or "")
    except ValueError:
        return False
    return isinstance(output, dict) and set(output) == {"error"}


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


class Watch:
    """Lines of a growing output file over time, sampled every `interval` seconds (each
    sample reads only what was appended since the last)."""

    def __init__(self, output: Path, interval: float = 0.1) -> None:
        self.output = output
        self.interval = interval
        self.offset = 0
        self.lines = 0
        self.samples: list[tuple[float, int]] = []

    def sample(self) -> None:
        if self.output.exists():
            with open(self.output, "rb") as f:
                f.seek(self.offset)
                data = f.read()
            self.offset += len(data)
            self.lines += data.count(b"\n")
        self.samples.append((time.monotonic(), self.lines))

    def until(self, predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        """Sample until `predicate()` holds; `TimeoutError` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self.sample()
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(self.interval)
            self.sample()

    def lines_at(self, moment: float) -> int:
        return max((lines for at, lines in self.samples if at <= moment), default=0)

    def slowed(self, fault: float, window: float = 1.0) -> float:
        """Seconds from `fault` until a `window` wrote at least half as many lines as the
        `2 * window` before it did per window; until the last line if none did."""
        pace = (self.lines_at(fault) - self.lines_at(fault - 2 * window)) / 2
        last = next(at for at, lines in self.samples if lines == self.lines)  # the run's last line
        for at, lines in self.samples:
            if at >= fault and at + window <= last and self.lines_at(at + window) - lines >= pace / 2:
                return at - fault
        return max(0.0, last - fault)


def wait_until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Cluster:
    """One scenario's processes, all on loopback under `workdir`."""

    def __init__(self, workdir: Path, ack_wait: float = 3.0) -> None:
        self.workdir = workdir
        self.store = workdir / "jetstream"
        self.ack_wait = ack_wait
        self.server = bus.EmbeddedServer(store_dir=self.store)
        self.url = ""
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Self:
        self.url = self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.server.stop()

    def env(self, **more: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
        return {**clean, "NATS_URL": self.url, **more}

    def _spawn(self, args: list[str], log: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.workdir / log, "ab") as out:
            process = subprocess.Popen(
                [*RUNNER, *args],
                env=self.env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.processes.append(process)
        return process

    def start_worker(
        self, *functions: str, concurrency: int = 256, model_args: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """A `gym-runner serve` process; returns once its services answer."""
        args = [
            "serve",
            *functions,
            "--ack-wait",
            str(self.ack_wait),
            "--concurrency",
            str(concurrency),
            *model_args,
        ]
        process = self._spawn(args, f"worker-{len(self.processes)}.log")
        names = [name for name in functions if name not in ("offline", "openai")]
        asyncio.run(self._wait_served(names + (["policy"] if {"offline", "openai"} & set(functions) else [])))
        return process

    async def _wait_served(self, services: list[str]) -> None:
        nc = await bus.connect(self.url, name="cluster")
        try:
            for service in services:
                deadline = time.monotonic() + 30
                while not (await bus.service_infos(nc, service, window=0.1)):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{service} did not start")
        finally:
            await nc.close()

    def collect(
        self, source: Path, output: Path, *args: str, log: str = "runner.log"
    ) -> subprocess.Popen[bytes]:
        """A `gym-runner collect` process on this cluster's bus, its output appended to `log`."""
        return self._spawn(["collect", "-i", str(source), "-o", str(output), *args], log)

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait()

    def restart_server(self, downtime: float) -> None:
        """Stop the server (its data stays on disk) and start it again on the same port."""
        port = self.server.port
        self.server.stop()
        time.sleep(downtime)
        self.server = bus.EmbeddedServer(port=port, store_dir=self.store)
        self.server.start()

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""


_LEADER_KNOWN = re.compile(r"new metadata leader|Self is new JetStream cluster metadata leader")


class NatsServers:
    """`size` real nats-server processes on loopback, routed into one cluster with
    JetStream (R3 needs three), each with `extra` appended to its configuration (an
    `authorization` block, TLS). Each is reached by its own URL; a client given one
    learns the others from it and moves to them when its server dies."""

    def __init__(self, workdir: Path, size: int = 3, extra: str = "") -> None:
        self.workdir = workdir
        self.size = size
        self.extra = extra
        self.ports = [free_port() for _ in range(size)]
        self.routes = [free_port() for _ in range(size)]
        self.processes: list[subprocess.Popen[bytes] | None] = []

    def url(self, node: int) -> str:
        return f"nats://127.0.0.1:{self.ports[node]}"

    @property
    def urls(self) -> str:
        """Every server's URL, comma-separated (a `NATS_URL`)."""
        return ",".join(self.url(node) for node in range(self.size))

    def _config(self, node: int) -> str:
        store = self.workdir / f"n{node}"
        routes = [f"nats-route://127.0.0.1:{port}" for i, port in enumerate(self.routes) if i != node]
        cluster = (
            f'cluster {{ name: gym, listen: "127.0.0.1:{self.routes[node]}", routes: {json.dumps(routes)} }}\n'
            if self.size > 1
            else ""
        )
        return (
            f'server_name: n{node}\nlisten: "127.0.0.1:{self.ports[node]}"\n'
            f"max_payload: {schemas.DEFAULT_LIMITS.max_payload}\n"
            f"jetstream {{ store_dir: {json.dumps(str(store))} }}\n{cluster}{self.extra}"
        )

    def start(self, timeout: float = 30.0) -> Self:
        self.launch()
        wait_until(self._jetstream_ready, timeout, "the cluster's JetStream")
        return self

    def launch(self) -> None:
        """Start the servers without waiting for them (or their cluster) to be ready."""
        for node in range(self.size):
            config = self.workdir / f"n{node}.conf"
            config.write_text(self._config(node))
            with open(self.workdir / f"n{node}.log", "ab") as log:
                self.processes.append(
                    subprocess.Popen(
                        [bus.connection.find_server_binary(), "-c", str(config)], stdout=log, stderr=log
                    )
                )

    def _jetstream_ready(self) -> bool:
        """Every server answers, and knows the cluster's JetStream leader (one that does not
        yet leaves a client's JetStream requests unanswered)."""
        for node in range(self.size):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.ports[node])) != 0:
                    return False
        return self.size == 1 or all(_LEADER_KNOWN.search(self.log(node)) for node in range(self.size))

    def log(self, node: int) -> str:
        path = self.workdir / f"n{node}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, node: int) -> None:
        """SIGKILL one server: no goodbye to its clients or its peers."""
        process = self.processes[node]
        if process is not None:
            process.kill()
            process.wait()
            self.processes[node] = None

    def restart(self, node: int, downtime: float) -> None:
        """Stop one server (SIGTERM; its JetStream data stays) and start it again with the
        same configuration after `downtime` seconds."""
        process = self.processes[node]
        if process is not None:
            process.terminate()
            process.wait(30)
        time.sleep(downtime)
        with open(self.workdir / f"n{node}.log", "ab") as log:
            config = self.workdir / f"n{node}.conf"
            self.processes[node] = subprocess.Popen(
                [bus.connection.find_server_binary(), "-c", str(config)], stdout=log, stderr=log
            )
        wait_until(self._jetstream_ready, 30, "the restarted server")

    def stop(self) -> None:
        for node, process in enumerate(self.processes):
            if process is not None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                self.processes[node] = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
