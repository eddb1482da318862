"""The performance figures P0–P6, each measured on loopback with real processes.

P0  raw nats-py request-reply round trips/s: the yardstick the others are divided by
P1  single-step tool rollouts/s through the durable task queue (weather environment, simple
    agent, the zero-latency offline policy), CPU-seconds per 1,000 rollouts over all processes
P2  the same with a model taking 200 ms per call, at several rollouts in flight, against
    ideal = min(in flight / rollout latency, P1 rate); a rollout here makes two model calls
P3  the openai-SDK model adapter against a local OpenAI-compatible server answering in 200 ms,
    at several concurrent calls, against ideal = concurrency / 0.2 s; a bare aiohttp client
    posting the same body beside it shows what the HTTP transport alone reaches, and the CPU
    per call shows why: one process cannot finish calls faster than one core allows
P4  runner peak RSS for input files of 10k and N rows; all processes' RSS during P1
P5  seconds from `gym-runner collect` start to the first rollout written (embedded default)
P6  latency of one rollout with nothing else in flight: direct request, and through the queue
P7  scaling: P1's collection with 1, 2 and 4 worker processes on one server, and with two
    workers on two servers of a 3-server cluster; what limits it, and what N machines predict
P8  the `vllm` model function (token capture on) against the stub's Chat Completions answering
    in 200 ms, 1,024 calls in flight, beside a bare aiohttp client posting the same chat body:
    the share of that ceiling it keeps is what its conversion and token capture cost (medians
    of alternated runs)
P9  CPU per weather rollout with the policy over HTTP (the `vllm` model function, token capture
    on, against the local vLLM-like stub in its own process) beside the same collection with the
    in-process offline policy, in the same run; the stub's own CPU is not counted (it stands for
    the inference server)
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import psutil

from bench._cluster import NatsServers
from bench._procs import (
    EXAMPLE,
    RUNNER,
    WEATHER,
    WEATHER_AGENT,
    Fleet,
    Sampler,
    count_lines,
    cpu_seconds,
)
from bench.openai_stub import free_port
from bench.workers import ECHO
from gymbus import bus, schemas

_COLLECTED = re.compile(rb"in ([0-9.]+) s")


@dataclass
class Collection:
    rollouts: int
    seconds: float
    """From the start of collecting (after imports) to the last rollout written."""
    cpu: float
    """CPU-seconds of every process (server, workers, runner) during the collection."""
    peak_rss: int
    runner_rss: int
    runner_cpu: float = 0.0
    """CPU-seconds of the runner process alone."""

    @property
    def rate(self) -> float:
        return self.rollouts / self.seconds

    @property
    def cpu_per_thousand(self) -> float:
        return self.cpu / self.rollouts * 1000


def weather_input(directory: Path, rows: int, distinct: bool = False) -> Path:
    """`rows` weather task rows (each with its own prompt if `distinct`)."""
    base = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    path = directory / f"weather_{rows}.jsonl"
    with open(path, "w") as f:
        for i in range(rows):
            row = base[i % len(base)]
            if distinct:
                row = json.loads(json.dumps(row))
                row["responses_create_params"]["input"][-1]["content"] += f" (#{i})"
            f.write(json.dumps(row) + "\n")
    return path


def collect(fleet: Fleet, source: Path, *args: str) -> Collection:
    """Run `gym-runner collect` on `fleet`'s bus and measure it."""
    output = source.with_name(f"{source.stem}_out.jsonl")
    others = fleet.processes()
    before = cpu_seconds(others)
    runner = subprocess.Popen(
        [*RUNNER, "collect", "-i", str(source), "-o", str(output), "--agent", WEATHER_AGENT, *args],
        env=fleet.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    sampler = Sampler(runner, others, output)
    sampler.run()
    stderr = runner.stderr.read() if runner.stderr else b""
    if runner.returncode != 0:
        raise RuntimeError(f"collect failed:\n{stderr.decode(errors='replace')[-2000:]}")
    seconds = float(_COLLECTED.search(stderr.replace(b"\n", b" ")).group(1))  # type: ignore[union-attr]
    cpu = cpu_seconds(others) - before + sampler.runner_cpu
    return Collection(
        count_lines(output), seconds, cpu, sampler.peak_rss, sampler.peak_runner_rss, sampler.runner_cpu
    )


def p0_round_trips(seconds: float = 3.0, concurrency: int = 256) -> float:
    """Raw nats-py request-reply round trips/s, one requester process and one echo process."""
    with Fleet() as fleet:
        fleet.spawn([sys.executable, "-m", "bench.workers", "echo"])
        return asyncio.run(_round_trips(fleet.url, seconds, concurrency))


async def _round_trips(url: str, seconds: float, concurrency: int) -> float:
    nc = await bus.connect(url, name="bench-p0")
    done = 0
    stop_at = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            await nc.client.request(ECHO, b"x" * 64, timeout=5)
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    await nc.close()
    return done / elapsed


def _weather_worker(fleet: Fleet, concurrency: int, model: bool = True) -> None:
    functions = [WEATHER, WEATHER_AGENT, *(["offline"] if model else [])]
    fleet.spawn([*RUNNER, "serve", *functions, "--concurrency", str(concurrency)])


def p1_rollouts(tasks: int, workdir: Path, workers: int = 2) -> Collection:
    """`tasks` weather rollouts on `workers` worker processes (collect's default is two)."""
    with Fleet() as fleet:
        for _ in range(workers):
            _weather_worker(fleet, 1024)
        source = weather_input(workdir, 5)
        return collect(fleet, source, "--num-repeats", str(tasks // 5), "--concurrency", "2048")


def p2_slow_model(in_flight: int, workdir: Path, latency: float = 0.2, workers: int = 2) -> Collection:
    """P1's set-up (as many model processes as workers), with the model answering after
    `latency` seconds; enough rollouts that ramp-up and drain weigh little."""
    with Fleet() as fleet:
        for _ in range(workers):
            _weather_worker(fleet, in_flight, model=False)
            fleet.spawn([sys.executable, "-m", "bench.workers", "slow-model", str(latency)])
        tasks = max(20000, 4 * in_flight)
        source = weather_input(workdir, 5)
        return collect(fleet, source, "--num-repeats", str(tasks // 5), "--concurrency", str(in_flight))


def p4_runner_rss(rows: int, workdir: Path) -> Collection:
    """A collection of `rows` distinct rows answered by the instant agent: the runner alone."""
    with Fleet() as fleet:
        fleet.spawn([sys.executable, "-m", "bench.workers", "instant-agent"])
        source = weather_input(workdir, rows, distinct=True)
        return collect(fleet, source, "--concurrency", "4096")


def p5_first_rollout(workdir: Path) -> float:
    """Seconds from starting `gym-runner collect` on the embedded default to its first rollout."""
    output = workdir / "p5.jsonl"
    output.unlink(missing_ok=True)
    env = {k: v for k, v in Fleet().env().items() if k != "NATS_URL"}
    started = time.monotonic()
    runner = subprocess.Popen(
        [*RUNNER, "collect", "-i", str(EXAMPLE), "-o", str(output), "--agent", WEATHER_AGENT],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    while not (output.exists() and output.stat().st_size):
        if runner.poll() is not None:
            raise RuntimeError("collect exited before writing a rollout")
        time.sleep(0.005)
    first = time.monotonic() - started
    runner.wait(60)
    return first


def p6_latency(samples: int = 200) -> tuple[float, float]:
    """Median milliseconds of one rollout alone: direct on the agent's subject, and through
    the task queue (publish to `gym.tasks.<agent>`, result from `gym.results.<run>`)."""
    with Fleet() as fleet:
        _weather_worker(fleet, 256)
        return asyncio.run(_latencies(fleet.url, samples))


async def _latencies(url: str, samples: int) -> tuple[float, float]:
    nc = await bus.connect(url, name="bench-p6")
    row = json.loads(EXAMPLE.read_text().splitlines()[0])
    row["agent_ref"] = {"name": WEATHER_AGENT}
    body = json.dumps(row).encode()
    direct = []
    for _ in range(samples):
        started = time.perf_counter()
        await bus.request(nc, bus.subjects.agent_run(WEATHER_AGENT), body, timeout=10)
        direct.append(time.perf_counter() - started)
    results: asyncio.Queue[float] = asyncio.Queue()

    async def arrived(msg: object) -> None:
        results.put_nowait(time.perf_counter())

    await nc.client.subscribe(bus.subjects.results("p6"), cb=arrived)
    js = nc.js
    await bus.run.ensure_streams(nc)
    queued = []
    for seq in range(samples):
        started = time.perf_counter()
        headers = {schemas.RUN: "p6", schemas.SEQ: str(seq), schemas.MSG_ID: f"p6.{seq}.{time.time()}"}
        await js.publish(bus.subjects.tasks(WEATHER_AGENT), body, headers=headers)
        queued.append(await asyncio.wait_for(results.get(), 10) - started)
    await nc.close()
    return statistics.median(direct) * 1000, statistics.median(queued) * 1000


@dataclass
class CallRate:
    calls_per_second: float
    cpu_ms_per_call: float
    """CPU time of the calling process per finished call: what caps one core's rate."""


def p3_openai_adapter(
    concurrency: int, client: str = "adapter", latency: float = 0.2, seconds: float = 6.0
) -> CallRate:
    """Calls/s with `concurrency` calls in flight against the stub OpenAI-compatible server
    (its own process) answering after `latency` seconds. `client` is "adapter" (the `openai`
    model adapter) or "aiohttp" (a bare aiohttp session posting the same body: the ceiling
    the HTTP transport alone reaches on this machine)."""
    calls = _adapter_calls if client == "adapter" else _aiohttp_calls
    return _against_stub(calls, concurrency, latency, seconds)


def p8_vllm_function(
    concurrency: int, client: str = "vllm", latency: float = 0.2, seconds: float = 6.0
) -> CallRate:
    """Like P3, for the `vllm` model function (token capture on) against the stub's Chat
    Completions; `client` "aiohttp" posts the function's own chat body with a bare session."""
    calls = _vllm_calls if client == "vllm" else _aiohttp_chat_calls
    return _against_stub(calls, concurrency, latency, seconds)


def _against_stub(
    calls: Callable[[str, int, float], Coroutine[Any, Any, CallRate]],
    concurrency: int,
    latency: float,
    seconds: float,
) -> CallRate:
    port = free_port()
    stub = subprocess.Popen(
        [sys.executable, "-m", "bench.openai_stub", "--port", str(port), "--latency", str(latency)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_port(port)
        return asyncio.run(calls(f"http://127.0.0.1:{port}/v1", concurrency, seconds))
    finally:
        stub.terminate()
        stub.wait(10)


def _wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


async def _adapter_calls(url: str, concurrency: int, seconds: float) -> CallRate:
    from gymbus.functions import ModelOptions
    from gymbus.functions.registry import MODELS
    from gymbus.schemas import ResponsesCreateParams

    generate = MODELS["openai"].make(ModelOptions(base_url=url, api_key="bench", model="stub"))
    params = ResponsesCreateParams(input="what's the weather like in sf?")
    try:
        return await _call_rate(lambda: generate(params), concurrency, seconds)
    finally:
        await generate.aclose()  # type: ignore[attr-defined]


async def _aiohttp_calls(url: str, concurrency: int, seconds: float) -> CallRate:
    import aiohttp

    body = json.dumps({"model": "stub", "input": "what's the weather like in sf?"}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post() -> None:
            async with session.post(f"{url}/responses", data=body, headers=headers) as reply:
                reply.raise_for_status()
                await reply.read()

        return await _call_rate(post, concurrency, seconds)


async def _call_rate(call: Callable[[], Awaitable[object]], concurrency: int, seconds: float) -> CallRate:
    done = 0
    warm_until = time.monotonic() + 3.0  # thousands of connections take a while to open
    stop_at = warm_until + seconds

    async def loop() -> None:
        nonlocal done
        while True:
            await call()
            if warm_until <= time.monotonic() < stop_at:
                done += 1  # calls that finish inside the window, whenever they began

    bus.tune_gc()  # as a worker process does after its imports
    callers = [asyncio.create_task(loop()) for _ in range(concurrency)]
    await asyncio.sleep(warm_until - time.monotonic())
    cpu_at_start = time.process_time()
    await asyncio.sleep(stop_at - time.monotonic())
    cpu = time.process_time() - cpu_at_start
    for caller in callers:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    return CallRate(done / seconds, cpu / max(done, 1) * 1000)


def _weather_params() -> schemas.ResponsesCreateParams:
    """The first weather task's request: a system prompt, a question and one tool."""
    import msgspec

    row = EXAMPLE.read_bytes().splitlines()[0]
    return msgspec.json.decode(row, type=schemas.TaskRow).responses_create_params


async def _vllm_calls(url: str, concurrency: int, seconds: float) -> CallRate:
    from gymbus.functions import ModelOptions
    from gymbus.functions.registry import MODELS

    generate = MODELS["vllm"].make(ModelOptions(base_url=url, model="stub", api="vllm"))
    params = _weather_params()
    try:
        return await _call_rate(lambda: generate(params), concurrency, seconds)
    finally:
        await generate.aclose()  # type: ignore[attr-defined]


async def _aiohttp_chat_calls(url: str, concurrency: int, seconds: float) -> CallRate:
    import aiohttp
    import msgspec

    from gymbus.functions.models._chat import chat_request

    body = chat_request(_weather_params(), "stub", reasoning="think")
    body.update(logprobs=True, top_logprobs=0, return_token_ids=True, return_tokens_as_token_ids=True, n=1)
    data = msgspec.json.encode(body)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post() -> None:
            async with session.post(f"{url}/chat/completions", data=data, headers=headers) as reply:
                reply.raise_for_status()
                await reply.read()

        return await _call_rate(post, concurrency, seconds)


@dataclass
class HttpCost:
    http: Collection
    offline: Collection

    @property
    def ratio(self) -> float:
        return (self.http.cpu / self.http.rollouts) / (self.offline.cpu / self.offline.rollouts)


def p9_http_model_cost(tasks: int, workdir: Path, workers: int = 2) -> HttpCost:
    """P1's collection of `tasks` weather rollouts twice: with the offline policy, and with the
    `vllm` model function calling the local vLLM-like stub (two model calls and one `/tokenize`
    per rollout). CPU counts the server, the workers and the runner, not the stub."""
    source = weather_input(workdir, 5)
    repeats = ("--num-repeats", str(tasks // 5), "--concurrency", "1024")
    with Fleet() as fleet:
        for _ in range(workers):
            _weather_worker(fleet, 1024)
        offline = collect(fleet, source, *repeats)
    port = free_port()
    stub = subprocess.Popen(
        [sys.executable, "-m", "bench.vllm_stub", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_port(port)
        model = [
            "vllm",
            "--model-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "stub",
            "--model-api",
            "vllm",
        ]
        with Fleet() as fleet:
            for _ in range(workers):
                fleet.spawn([*RUNNER, "serve", WEATHER, WEATHER_AGENT, *model, "--concurrency", "1024"])
            http = collect(fleet, source, *repeats)
    finally:
        stub.terminate()
        stub.wait(10)
    if http.rollouts < tasks or offline.rollouts < tasks:
        raise RuntimeError(f"P9 wrote {http.rollouts} and {offline.rollouts} of {tasks} rollouts")
    return HttpCost(http, offline)


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="gymbus-bench-"))


class _ClusterFleet(Fleet):
    """A Fleet on a 3-server cluster: each process is given one server's URL."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.servers = NatsServers(workdir, size=3)
        self.node = 0

    def __enter__(self) -> Self:
        self.servers.start()
        self.url = self.servers.url(0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_children()
        self.servers.stop()

    def env(self) -> dict[str, str]:
        return {**super().env(), "NATS_URL": self.servers.url(self.node)}

    def processes(self) -> list[psutil.Process]:
        pids = [p.pid for p in self.servers.processes if p is not None]
        pids += [child.pid for child in self.children if child.poll() is None]
        return [psutil.Process(pid) for pid in pids]


def p7_scaling(tasks: int, workdir: Path, workers: int, split: bool = False) -> Collection:
    """P1's collection on `workers` worker processes (each: environment, agent, offline
    policy); `split`: on a 3-server cluster, the workers alternate between servers 0 and 1
    and the runner uses server 0."""
    fleet: Fleet = _ClusterFleet(workdir / f"p7-{workers}") if split else Fleet()
    if split:
        (workdir / f"p7-{workers}").mkdir(exist_ok=True)
    with fleet:
        for index in range(workers):
            if isinstance(fleet, _ClusterFleet):
                fleet.node = index % 2
            _weather_worker(fleet, 1024)
        if isinstance(fleet, _ClusterFleet):
            fleet.node = 0
        source = weather_input(workdir, 5)
        return collect(fleet, source, "--num-repeats", str(tasks // 5), "--concurrency", "2048")
