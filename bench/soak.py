"""A soak: one long collection on a locked bus, a random fault every few seconds.

    python -m bench.faults --soak MINUTES [--seed N] [--every SECONDS] [--hog N]

The bus is locked by `gym-runner secure init` on a real nats-server with file storage, and
every process has its own role's key: two worker processes each for every environment of
`MIX` (those whose verifiers compute for real: reasoning-gym's scorers, SymPy, the
instruction checks, a sandbox), each of their agents and the policy (over an
OpenAI-compatible stub endpoint), and one `gym-runner collect` for the whole soak, of the
rows in examples/ for those environments. `--hog N` starts N processes that spin a core
each beside them, for a machine whose cores are all taken. Every `--every` seconds on
average, one fault at random:

    worker kill -9      a worker is SIGKILLed, and a new one started in its place
    SIGSTOP/SIGCONT     a worker is frozen for 2 to 10 s
    server restart      nats-server is stopped and started again 1 s later (its data kept)
    model 5xx burst     the model endpoint answers 500 or 429 to every call for 1 to 4 s
    producer purge      the producer's key tries to purge and delete every stream (the claim
                        store too) and to publish a result: all must be refused

Every minute it reads what the run wrote so far and checks that no rollout is written twice
or failed, that none is missing for long (one missing behind later ones for over `STUCK`
seconds means a hang), that rollouts still arrive, and samples each process kind's memory
(the largest resident set of its processes). At the end the runner gets SIGINT: it stops
publishing, finishes what it started and exits. It starts rollouts in order, so what it
wrote must be exactly its first N rollouts, each once. The closing line gives the rollouts,
the faults injected by kind, lost, duplicated, and RSS at the first minute and at the end
per process kind; memory may grow by `RSS_GROWTH` at most (nats-server's is shown, not
judged: it holds each answered request's reply permission for the role's answer window).

Busy is not dead: a rollout may start over (`_gymbus.restarts`) only because of a fault.
Each restart an agent worker logs is put down to a fault when one touched its environment
(a kill or freeze of that environment's or its agent's worker, or a server restart) at most
`AFTERMATH` seconds before; any other is a restart of a live call, and so is a worker that
lost its connection while neither it was frozen nor the server restarting. Either fails the
soak, and the closing lines give both counts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats.errors
import psutil

from bench._cluster import NatsServers, wait_until
from bench.openai_stub import OpenAIStub, StubServer
from gymbus import bus
from gymbus.functions.registry import AGENTS
from gymbus.runner.security._secure import SecureLayout, secure_init
from gymbus.schemas import DEFAULT_TIMEOUTS, ROLLOUT_RESTART, NotAuthorized

__all__ = ["soak"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUNNER = [sys.executable, "-m", "gymbus.runner"]
MIX = ("reasoning_gym", "math_with_judge", "instruction_following", "code_gen")
"""The environments served: their verifiers compute (scorers, SymPy, the instruction checks,
a sandboxed run), in threads or child processes beside the loop that answers the bus."""
AGENT_OF = {env: next(name for name, spec in AGENTS.items() if spec.environment == env) for env in MIX}
KINDS = {  # worker kind: its role, what it serves, and the environment whose calls it carries
    **{f"env {env}": (f"env-{env}", [env], env) for env in MIX},
    **{f"agent {env}": (f"agent-{agent}", [agent], env) for env, agent in AGENT_OF.items()},
    "model": ("model-policy", ["openai", "--model", "stub", "--model-api", "responses"], None),
}
AFTERMATH = DEFAULT_TIMEOUTS.silence_most + ROLLOUT_RESTART.cap + 15.0
"""Seconds after a fault ends in which a restart is its doing: the longest silence a caller
allows, the restart's back-off, and time for a busy machine to log and for the soak to read."""
RECONNECTED = 10.0  # seconds after a freeze or a server restart in which a lost connection is its doing
REPLICAS = 2  # workers of each kind
CONCURRENCY = 256  # rollouts in flight (the runner's --concurrency)
STUCK = 180.0  # seconds a rollout may be missing behind later ones before it counts as hung
RATE_CEILING = 3000  # rollouts/s this machine cannot reach: sizes the run so it never ends first
RSS_GROWTH = 64 * 1024 * 1024  # bytes a process kind may grow from the first minute to the end
FINISH = 600.0  # seconds the runner may take to finish what it started, after SIGINT
FAULTS = ("worker kill -9", "SIGSTOP/SIGCONT", "server restart", "model 5xx burst", "producer purge")


@dataclass
class Written:
    """What the run wrote so far, read a little more each time: keys, repeats, failures."""

    output: Path
    repeats: int
    offsets: dict[Path, int] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    duplicated: int = 0
    restarts: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    missing_since: dict[int, float] = field(default_factory=dict)

    def read(self) -> None:
        failures = self.output.with_name(f"{self.output.stem}_failures.jsonl")
        for path, failed in ((self.output, False), (failures, True)):
            for row in self._new_rows(path):
                seq = row["_ng_task_index"] * self.repeats + row["_ng_rollout_index"]
                self.duplicated += seq in self.seen
                self.seen.add(seq)
                self.restarts += row.get("_gymbus", {}).get("restarts", 0)
                if failed:
                    self.failures[str(row.get("_ng_failure_class"))] += 1
        now = time.monotonic()
        newest = max(self.seen, default=-1)
        since = {seq: self.missing_since.get(seq, now) for seq in range(newest) if seq not in self.seen}
        self.missing_since = since

    def _new_rows(self, path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        with open(path, "rb") as file:
            file.seek(self.offsets.get(path, 0))
            data = file.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        self.offsets[path] = self.offsets.get(path, 0) + len(whole)
        return [json.loads(line) for line in whole.splitlines()]

    def stuck(self) -> list[int]:
        now = time.monotonic()
        return sorted(seq for seq, at in self.missing_since.items() if now - at > STUCK)

    def lost(self) -> int:
        """Rollouts before the newest written that are not written."""
        return len(self.missing_since)


@dataclass
class Incident:
    """A fault, from `start` to `end` (time.monotonic()): the environment whose calls it
    touched (`None`: every one's, as a server restart does; "" none's, as a model worker's
    end does: its calls are retried, never restarted) and the process it froze, if any."""

    kind: str
    start: float
    end: float
    environment: str | None = None
    frozen: int | None = None


class WorkerLogs(threading.Thread):
    """Reads the workers' logs as they grow and stamps each rollout restart and each lost
    connection with when it was read (the logs carry no times)."""

    RESTART = b"starts over:"
    LOST = b"lost the connection to NATS"

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.logs: list[tuple[Path, str, int]] = []  # log, kind, pid
        self.offsets: dict[Path, int] = {}
        self.restarts: list[tuple[float, str, str]] = []  # when, kind of worker, what it said
        self.lost: list[tuple[float, str, int]] = []  # when, kind, pid
        self.stopping = threading.Event()

    def follow(self, log: Path, kind: str, pid: int) -> None:
        self.logs.append((log, kind, pid))

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            self.read()

    def read(self) -> None:
        now = time.monotonic()
        for log, kind, pid in list(self.logs):
            with open(log, "rb") as file:
                file.seek(self.offsets.get(log, 0))
                data = file.read()
            whole = data[: data.rfind(b"\n") + 1]
            self.offsets[log] = self.offsets.get(log, 0) + len(whole)
            for line in whole.splitlines():
                if self.RESTART in line:
                    self.restarts.append((now, kind, line.decode(errors="replace")))
                elif self.LOST in line:
                    self.lost.append((now, kind, pid))


@dataclass
class Soak:
    """The bus, its processes, and what has been done to them."""

    work: Path
    layout: SecureLayout
    servers: NatsServers
    stub: OpenAIStub
    model_url: str
    rng: random.Random
    workers: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    frozen: dict[int, float] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    incidents: list[Incident] = field(default_factory=list)
    logs: WorkerLogs = field(default_factory=WorkerLogs)
    rss: dict[str, list[int]] = field(default_factory=dict)
    started: int = 0

    def env(self, role: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
        return {**clean, "NATS_URL": self.servers.url(0), "NATS_NKEY": str(self.layout.credentials[role])}

    def start_workers(self, *kinds: str) -> None:
        """A worker of each of `kinds`, started together; returns once each is ready."""
        started = []
        for kind in kinds:
            role, args, _ = KINDS[kind]
            model = ["--model-url", self.model_url] if kind == "model" else []
            log = self.work / f"{kind.replace(' ', '-')}-{self.started}.log"
            self.started += 1
            with open(log, "ab") as out:
                process = subprocess.Popen(
                    [*RUNNER, "serve", *args, *model, "--ack-wait", "3", "--concurrency", str(CONCURRENCY)],
                    env=self.env(role), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            self.workers.setdefault(kind, []).append(process)
            self.logs.follow(log, kind, process.pid)
            started.append((kind, process, log))
        for kind, process, log in started:
            wait_until(
                lambda log=log, process=process: "ready:" in log.read_text(errors="replace") or process.poll() is not None,
                DEFAULT_TIMEOUTS.worker_start, log.name,
            )  # fmt: skip
            if process.poll() is not None:
                raise RuntimeError(
                    f"a {kind} worker exited at start:\n{log.read_text(errors='replace')[-3000:]}"
                )

    def serving(self, kind: str) -> list[subprocess.Popen[bytes]]:
        """The kind's live workers that are not frozen."""
        return [w for w in self.workers.get(kind, []) if w.poll() is None and w.pid not in self.frozen]

    def inject(self) -> None:
        kind = self.rng.choice(FAULTS)
        {
            "worker kill -9": self._kill,
            "SIGSTOP/SIGCONT": self._freeze,
            "server restart": self._restart_server,
            "model 5xx burst": self._burst,
            "producer purge": self._purge,
        }[kind]()
        self.faults[kind] += 1

    def _victim(self) -> tuple[str, subprocess.Popen[bytes]] | None:
        """A worker whose kind keeps another serving."""
        kinds = [kind for kind in KINDS if len(self.serving(kind)) > 1]
        if not kinds:
            return None
        kind = self.rng.choice(kinds)
        return kind, self.rng.choice(self.serving(kind))

    def _kill(self) -> None:
        victim = self._victim()
        if victim is not None:
            victim[1].kill()
            victim[1].wait()
            now = time.monotonic()
            self.incidents.append(Incident("kill", now, now, KINDS[victim[0]][2] or ""))
            self.start_workers(victim[0])

    def _freeze(self) -> None:
        victim = self._victim()
        if victim is not None:
            os.kill(victim[1].pid, signal.SIGSTOP)
            now = time.monotonic()
            self.frozen[victim[1].pid] = now + self.rng.uniform(2, 10)
            self.incidents.append(Incident("freeze", now, now, KINDS[victim[0]][2] or "", victim[1].pid))

    def thaw(self, everyone: bool = False) -> None:
        now = time.monotonic()
        for pid, until in list(self.frozen.items()):
            if everyone or now >= until:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                del self.frozen[pid]
                for incident in self.incidents:
                    if incident.frozen == pid and incident.end == incident.start:
                        incident.end = now

    def _restart_server(self) -> None:
        start = time.monotonic()
        self.servers.restart(0, downtime=1.0)
        self.incidents.append(Incident("server restart", start, time.monotonic()))

    def restarts(self) -> tuple[int, list[str]]:
        """Rollout restarts the workers logged: how many came after a fault that touched
        their environment, and what the workers said of the others (of live calls)."""
        live = [
            f"{kind} worker: {said}"
            for at, kind, said in self.logs.restarts
            if not any(
                i.environment in (None, KINDS[kind][2]) and i.start - 1 <= at <= i.end + AFTERMATH
                for i in self.incidents
            )
        ]
        return len(self.logs.restarts) - len(live), live

    def live_disconnects(self) -> int:
        """Connections lost by workers that were neither frozen nor on a restarting server."""
        return sum(
            not any(
                i.frozen in (None, pid) and i.kind != "kill" and i.start - 1 <= at <= i.end + RECONNECTED
                for i in self.incidents
            )
            for at, _, pid in self.logs.lost
        )

    def _burst(self) -> None:
        self.stub.failure_rate = 1.0
        try:
            time.sleep(self.rng.uniform(1, 4))
        finally:
            self.stub.failure_rate = 0.0

    def _purge(self) -> None:
        did = asyncio.run(_purge_as_producer(self.servers.url(0), self.layout.credentials["producer"]))
        if did:
            raise RuntimeError(f"the producer's key did what it must not: {did}")

    def sample_rss(self, runner: subprocess.Popen[bytes]) -> dict[str, int]:
        """Each kind's largest resident set now, in bytes (and kept for the report)."""
        pids = {
            "runner": [runner.pid],
            **{f"{kind} worker": [w.pid for w in self.workers[kind] if w.poll() is None] for kind in KINDS},
            "nats-server": [p.pid for p in self.servers.processes if p is not None],
        }
        sample = {}
        for kind, group in pids.items():
            sizes = []
            for pid in group:
                try:
                    sizes.append(psutil.Process(pid).memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
            sample[kind] = max(sizes, default=0)
            self.rss.setdefault(kind, []).append(sample[kind])
        return sample


async def _purge_as_producer(url: str, key: Path) -> str | None:
    """What the producer's key managed of purging or deleting a stream and publishing a
    result (`None`: every try was refused)."""
    nc = await bus.connect(url, name="soak producer", auth=bus.BusAuth(nkey=key), role="producer")
    js = nc.client.jetstream(timeout=0.5)
    try:
        for stream in (bus.subjects.CLAIMS_STREAM, bus.subjects.TASKS_STREAM, bus.subjects.RESULTS_STREAM):
            for attempt in (js.purge_stream, js.delete_stream):
                try:
                    await attempt(stream)
                    return f"{attempt.__name__} {stream}"
                except (TimeoutError, nats.errors.Error):
                    pass  # refused: the server drops the request and says so
        await nc.client.publish(bus.subjects.results("soak"), b'{"reward": 999.0}')
        try:
            await bus.connection.check_permitted(nc, [bus.subjects.results("soak")], "producer")
        except NotAuthorized:
            return None
        return "publish a result"
    finally:
        await nc.close()


def soak(minutes: float, seed: int, every: float, hogs: int = 0) -> int:
    """Run the soak (see the module docstring), with `hogs` processes spinning beside it;
    0 if nothing was lost, doubled, failed or stuck, no live call restarted and memory
    stayed flat, else 1."""
    logging.getLogger("gymbus").setLevel(logging.ERROR)  # the producer's refusals are the point
    with tempfile.TemporaryDirectory(prefix="gymbus-soak-") as tmp:
        work = Path(tmp)
        layout = secure_init(work / "secrets", list(MIX), [], ["policy"])
        config = layout.config.read_text()
        settings = "\n".join(line for line in config.splitlines() if line.startswith("ping_"))
        authorization = "authorization" + config.split("authorization", 1)[1]
        rng = random.Random(seed)
        stub = OpenAIStub(seed=rng.randrange(1 << 30))
        endpoint = StubServer(stub)
        model_url = endpoint.start()
        spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        with NatsServers(work, size=1, extra=settings + "\n" + authorization) as servers:
            state = Soak(work, layout, servers, stub, model_url, rng)
            state.logs.start()
            try:
                state.start_workers(*(kind for kind in KINDS for _ in range(REPLICAS)))
                return _run(state, minutes, every)
            finally:
                state.thaw(everyone=True)
                state.logs.stopping.set()
                _stop([w for group in state.workers.values() for w in group])
                _stop(spinning)
                endpoint.stop()


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def mixed_rows() -> list[str]:
    """The example rows of every environment of `MIX`, each naming its agent."""
    rows = []
    for env, agent in AGENT_OF.items():
        for line in (EXAMPLES / f"{env}.jsonl").read_text().splitlines():
            row = json.loads(line)
            row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
            rows.append(json.dumps(row))
    return rows


def _run(state: Soak, minutes: float, every: float) -> int:
    rows = mixed_rows()
    repeats = int(RATE_CEILING * minutes * 60 / len(rows)) + 1
    source = state.work / "tasks.jsonl"
    source.write_text("\n".join(rows) + "\n")
    out = state.work / "out.jsonl"
    with open(state.work / "runner.log", "ab") as log:
        runner = subprocess.Popen(
            [*RUNNER, "collect", "-i", str(source), "-o", str(out),
             "--num-repeats", str(repeats), "--concurrency", str(CONCURRENCY)],
            env=state.env("runner"), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    written = Written(out, repeats)
    print(f"soak: {minutes:g} min, a fault every {every:g} s on average, in {state.work}", flush=True)
    started = time.monotonic()
    problems = _watch(state, runner, written, started + minutes * 60, every)
    state.thaw(everyone=True)
    ended_first = runner.poll() is not None
    runner.send_signal(signal.SIGINT)  # stop publishing; finish and write what was started
    try:
        code = runner.wait(FINISH)
    except subprocess.TimeoutExpired:
        runner.kill()
        code = runner.wait()
        problems.append(f"the runner did not finish what it had started within {FINISH:.0f} s of SIGINT")
    written.read()
    time.sleep(0.5)  # the log reader's last look
    if ended_first:
        problems.append(f"the collection ended before the soak did (exit {code})")
    elif code not in (0, 130):
        problems.append(f"the runner exited {code} after SIGINT")
    return _report(state, written, time.monotonic() - started, problems)


def _watch(
    state: Soak, runner: subprocess.Popen[bytes], written: Written, deadline: float, every: float
) -> list[str]:
    """Faults and minute checks until `deadline` (or the runner's end); the problems seen."""
    problems: list[str] = []
    next_fault = time.monotonic() + 10 + state.rng.expovariate(1 / every)
    next_check = time.monotonic() + 60
    minute = before = 0
    while time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.2)
        state.thaw()
        if time.monotonic() >= next_fault:
            state.inject()
            next_fault = time.monotonic() + state.rng.expovariate(1 / every)
        if time.monotonic() >= next_check:
            minute += 1
            next_check += 60
            written.read()
            rss = state.sample_rss(runner)
            problems += _check(written, len(written.seen) - before, minute)
            before = len(written.seen)
            memory = ", ".join(f"{kind} {size / 2**20:.0f}" for kind, size in rss.items())
            after_fault, live = state.restarts()
            print(f"  minute {minute:3}: {before:8} rollouts; faults {sum(state.faults.values())}; "
                  f"restarts {after_fault} after a fault, {len(live)} of live calls; RSS MiB {memory}",
                  flush=True)  # fmt: skip
    return problems


def _check(written: Written, new: int, minute: int) -> list[str]:
    problems = []
    if written.duplicated:
        problems.append(f"minute {minute}: {written.duplicated} rollouts written twice")
    if written.failures:
        problems.append(f"minute {minute}: failed rollouts {dict(written.failures)}")
    stuck = written.stuck()
    if stuck:
        problems.append(f"minute {minute}: {len(stuck)} rollouts missing for over {STUCK:.0f} s: {stuck[:5]}")
    if new == 0:
        problems.append(f"minute {minute}: no rollout written in the last minute")
    for problem in problems:
        print(f"  PROBLEM {problem}", flush=True)
    return problems


def _report(state: Soak, written: Written, elapsed: float, problems: list[str]) -> int:
    lost = written.lost()
    if lost or written.duplicated or written.failures:
        problems.append(f"lost {lost}, duplicated {written.duplicated}, failed {dict(written.failures)}")
    memory = []
    for kind, samples in state.rss.items():
        start, end = samples[0], samples[-1]
        memory.append(f"{kind} {start / 2**20:.0f}->{end / 2**20:.0f}")
        if kind != "nats-server" and end - start > RSS_GROWTH:
            problems.append(f"{kind} memory grew from {start / 2**20:.0f} to {end / 2**20:.0f} MiB")
    after_fault, live = state.restarts()
    dropped = state.live_disconnects()
    if live or dropped:
        problems.append(f"{len(live)} restarts of live calls; {dropped} connections lost by live workers")
        problems += [f"a live call restarted: {said}" for said in live[:5]]
    faults = ", ".join(f"{kind} {state.faults[kind]}" for kind in FAULTS)
    print(
        f"soak {elapsed / 60:.1f} min: {len(written.seen)} rollouts; faults injected "
        f"({sum(state.faults.values())}): {faults}; lost {lost}, duplicated {written.duplicated}; "
        f"RSS MiB at the first minute->end: {', '.join(memory)}",
        flush=True,
    )
    print(
        f"restarts {after_fault + len(live)} ({written.restarts} in the rows written): {after_fault} after "
        f"an injected fault, {len(live)} of live calls; connections lost by live workers: {dropped}",
        flush=True,
    )
    for problem in problems:
        print(f"  PROBLEM {problem}", flush=True)
    return 1 if problems else 0
