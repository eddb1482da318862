"""A soak of the front: weather `/run`s at a steady rate through `gym-runner front`, for minutes.

    python -m bench.front_soak [--minutes 20] [--rate 20]

A nats-server with file storage, one `gym-runner serve` worker (GymBus's weather environment,
its simple agent, the `openai` adapter on `bench.openai_stub` at 0 ms) and `gym-runner front`
in front of them. A client posts one row of `examples/example_single_tool_call.jsonl` to the
agent's environment server's `/run` every 1/`rate` seconds, as NeMo Gym's rollout helper
does, whether or not the earlier ones have answered (at most `IN_FLIGHT` open at once).

Every minute it prints what the bus holds: nats-server's resident set, the results
stream's messages and bytes, the tasks stream's messages, the size of the server's
JetStream store directory, and the `/run`s answered in that minute by status. A result
leaves the bus once its `/run` has answered, so after warm-up every figure stays flat
however long the run; the closing line gives the first full minute against the last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil
import yaml

from bench._procs import EXAMPLE, RUNNER, WEATHER, WEATHER_AGENT, Fleet
from bench.nemo_gym_front import wait_answers
from bench.openai_stub import OpenAIStub, StubServer, free_port
from gymbus import bus

__all__ = ["Minute", "front_soak"]

IN_FLIGHT = 1024
"""`/run`s open at once at most: past it the client waits, and the rate it reports falls."""


@dataclass
class Minute:
    """What the bus held at the end of one minute, and the `/run`s answered in it."""

    minute: int
    server_rss: int
    results: int
    result_bytes: int
    tasks: int
    store_bytes: int
    answered: dict[int, int]

    def line(self) -> str:
        statuses = ", ".join(f"{code}: {count:,}" for code, count in sorted(self.answered.items())) or "none"
        return (
            f"minute {self.minute:>2}: nats-server RSS {self.server_rss / 2**20:.1f} MiB, GYM_RESULTS "
            f"{self.results:,} messages / {self.result_bytes / 1024:.1f} KiB, GYM_TASKS {self.tasks:,} "
            f"messages, store dir {self.store_bytes / 2**20:.2f} MiB; /runs answered {statuses}"
        )


def front_soak(minutes: float, rate: float) -> list[Minute]:
    """Run the soak, printing each minute's figures as it ends."""
    stub = StubServer(OpenAIStub())
    stub_url = stub.start()
    try:
        with Fleet() as fleet:
            model = ["openai", "--model-url", stub_url, "--model", "stub", "--model-api", "responses"]
            fleet.spawn([*RUNNER, "serve", WEATHER, WEATHER_AGENT, *model, "--concurrency", "1024"])
            head = free_port()
            front = fleet.spawn([*RUNNER, "front", WEATHER_AGENT, "--port", str(head)], ready=None)
            wait_answers(head, front)
            return asyncio.run(_soak(fleet, _run_url(head), minutes, rate))
    finally:
        stub.stop()


def _run_url(head: int) -> str:
    """The `/run` of the agent's environment server, as NeMo Gym's clients find it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{head}/global_config_dict_yaml", timeout=30) as reply:
        config = yaml.safe_load(json.loads(reply.read()))
    instance = config[f"{WEATHER_AGENT}_environment_server"]["environment_servers"]["legacy_agent"]
    return f"http://{instance['host']}:{instance['port']}/run"


async def _soak(fleet: Fleet, url: str, minutes: float, rate: float) -> list[Minute]:
    rows = [line.encode() for line in EXAMPLE.read_text().splitlines() if line.strip()]
    answered: dict[int, int] = {}
    slots = asyncio.Semaphore(IN_FLIGHT)
    nc = await bus.connect(fleet.url, name="bench-front-soak")
    figures: list[Minute] = []
    pending: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(row: bytes) -> None:
            try:
                async with session.post(url, data=row, headers={"Content-Type": "application/json"}) as reply:
                    await reply.read()
                    answered[reply.status] = answered.get(reply.status, 0) + 1
            except aiohttp.ClientError:
                answered[0] = answered.get(0, 0) + 1
            finally:
                slots.release()

        started = time.monotonic()
        sent = 0
        next_minute = started + 60
        end = started + minutes * 60
        while (now := time.monotonic()) < end or now >= next_minute:
            if now >= next_minute:
                figures.append(await _sample(fleet, nc, len(figures) + 1, answered))
                print(figures[-1].line(), flush=True)
                answered = {}
                next_minute += 60
                continue
            due = started + sent / rate
            if now < due:
                await asyncio.sleep(min(due - now, next_minute - now))
                continue
            await slots.acquire()
            task = asyncio.create_task(post(rows[sent % len(rows)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        await asyncio.gather(*pending)
    await nc.close()
    return figures


async def _sample(fleet: Fleet, nc: object, minute: int, answered: dict[int, int]) -> Minute:
    js = nc.js  # type: ignore[attr-defined]
    results = (await js.stream_info(bus.subjects.RESULTS_STREAM)).state
    tasks = (await js.stream_info(bus.subjects.TASKS_STREAM)).state
    server = fleet.server._process
    assert server is not None and fleet.server.log_path is not None
    store = fleet.server.log_path.parent / "jetstream"
    return Minute(
        minute, psutil.Process(server.pid).memory_info().rss, results.messages, results.bytes,
        tasks.messages, _size(store), dict(answered),
    )  # fmt: skip


def _size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=20.0, help="/runs posted per second")
    args = parser.parse_args()
    print(f"front soak: {args.rate:g} weather /runs per second for {args.minutes:g} minutes", flush=True)
    figures = front_soak(args.minutes, args.rate)
    if len(figures) >= 2:
        first, last = figures[0], figures[-1]
        print(
            f"first minute to last: nats-server RSS {first.server_rss / 2**20:.1f} -> {last.server_rss / 2**20:.1f} MiB, "
            f"GYM_RESULTS {first.results:,} -> {last.results:,} messages, store dir "
            f"{first.store_bytes / 2**20:.2f} -> {last.store_bytes / 2**20:.2f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
