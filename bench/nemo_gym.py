"""P10: what a tool call costs through the NeMo Gym bridge.

NeMo Gym's own `example_single_tool_call` server, hosted by `gym-runner serve
nemo-gym:example_single_tool_call`, answers `get_weather` three ways, each first one call at
a time (latency) and then `concurrency` calls in flight (rate, and CPU per call of the worker
process, which holds the bridge, and of the NeMo Gym server process):

- direct: HTTP straight to the server (aiohttp, the session cookie threaded by hand), what a
  NeMo Gym agent pays;
- bridge: a request on `gym.env.example_single_tool_call.tool.get_weather`, through the worker
  (KV session lookup, cookie, HTTP to the server);
- ported: the same subject served by GymBus's own port of the environment, no HTTP at all.

The bridge's added cost per call is bridge minus direct.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import psutil

from bench._procs import RUNNER, WEATHER, Fleet
from gymbus import bus, schemas

__all__ = ["ToolCost", "measure", "p10_bridge_cost"]

_ARGS = b'{"city": "Paris"}'
_SEED = b'{"responses_create_params": {"input": "what is the weather in Paris?"}}'


@dataclass
class ToolCost:
    latency_ms: float
    """Median milliseconds of one call with nothing else in flight."""
    calls_per_second: float
    worker_cpu_ms: float
    """CPU milliseconds per call of the GymBus worker process (0 for direct HTTP)."""
    server_cpu_ms: float
    """CPU milliseconds per call of the NeMo Gym server process (0 for the port)."""


def p10_bridge_cost(samples: int = 300, seconds: float = 5.0, concurrency: int = 32) -> dict[str, ToolCost]:
    """`direct`, `bridge` and `ported` costs of a `get_weather` call (see the module docstring)."""
    with Fleet() as fleet:
        worker = fleet.spawn([*RUNNER, "serve", f"nemo-gym:{WEATHER}"])
        costs = asyncio.run(_hosted(fleet.url, worker.pid, samples, seconds, concurrency))
    with Fleet() as fleet:
        worker = fleet.spawn([*RUNNER, "serve", WEATHER])
        costs["ported"] = asyncio.run(_ported(fleet.url, worker.pid, samples, seconds, concurrency))
    return costs


async def _hosted(
    url: str, worker_pid: int, samples: int, seconds: float, concurrency: int
) -> dict[str, ToolCost]:
    nc = await bus.connect(url, name="bench-p10")
    try:
        info = (await bus.service_infos(nc, WEATHER))[0]
        port = int(info.metadata["port"])
        worker = psutil.Process(worker_pid)
        server = next(
            child for child in worker.children(recursive=True) if "_launcher.py" in " ".join(child.cmdline())
        )
        headers = {schemas.SESSION: uuid.uuid4().hex}
        await bus.request(nc, bus.subjects.env_seed(WEATHER), _SEED, timeout=30, headers=headers)
        subject = bus.subjects.env_tool(WEATHER, "get_weather")

        async def through_bridge() -> object:
            return await bus.request(nc, subject, _ARGS, timeout=30, headers=headers)

        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.post(f"http://127.0.0.1:{port}/seed_session", data=_SEED) as seeded:
                cookie = "; ".join(f"{k}={v.value}" for k, v in seeded.cookies.items())

            async def direct() -> object:
                call = http.post(
                    f"http://127.0.0.1:{port}/get_weather", data=_ARGS, headers={"Cookie": cookie}
                )
                async with call as response:
                    return await response.read()

            return {
                "direct": await measure(direct, [server], None, samples, seconds, concurrency),
                "bridge": await measure(through_bridge, [server], worker, samples, seconds, concurrency),
            }
    finally:
        await nc.close()


async def _ported(url: str, worker_pid: int, samples: int, seconds: float, concurrency: int) -> ToolCost:
    nc = await bus.connect(url, name="bench-p10")
    try:
        headers = {schemas.SESSION: uuid.uuid4().hex}
        subject = bus.subjects.env_tool(WEATHER, "get_weather")

        async def call() -> object:
            return await bus.request(nc, subject, _ARGS, timeout=30, headers=headers)

        return await measure(call, [], psutil.Process(worker_pid), samples, seconds, concurrency)
    finally:
        await nc.close()


async def measure(
    call: Callable[[], Awaitable[object]], servers: list[psutil.Process], worker: psutil.Process | None,
    samples: int, seconds: float, concurrency: int,
) -> ToolCost:  # fmt: skip
    """`call`'s median latency over `samples` calls one at a time, then its rate with
    `concurrency` in flight for `seconds`, and the CPU `worker` and `servers` spent a call."""
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)
    server_before = sum(_cpu(p) for p in servers)
    worker_before = _cpu(worker) if worker else 0.0
    done = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await call()
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    server_cpu = sum(_cpu(p) for p in servers) - server_before
    worker_cpu = (_cpu(worker) - worker_before) if worker else 0.0
    return ToolCost(
        latency_ms=statistics.median(latencies) * 1000,
        calls_per_second=done / elapsed,
        worker_cpu_ms=worker_cpu / done * 1000,
        server_cpu_ms=server_cpu / done * 1000,
    )


def _cpu(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)
