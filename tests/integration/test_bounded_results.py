"""Results leave the bus once their caller has them, so a long run's store stays the size of
what is in flight: 2,000 `/run`s through the front, and a `collect` of 2,000 rollouts,
each watched on a nats-server of its own; and a worker `collect` started for itself that
is SIGKILLed mid-run is replaced, its rollouts redelivered, none lost.

Real processes: nats-server, `gym-runner serve`, `gym-runner front`, `gym-runner collect`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import nats
import psutil
import pytest
import yaml

from gymbus import bus
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT
from tests.fake_openai import FakeOpenAI, ServerThread, free_port
from tests.processes import spawn, stop

pytestmark = pytest.mark.timeout(300)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
ROWS = 2000
IN_FLIGHT = 64
"""Rollouts asked for at once: the front's callers, and `collect --concurrency`."""


async def stored_results(url: str, until: asyncio.Event) -> list[int]:
    """The results stream's message count, every 50 ms until `until` is set, and once
    more after: the last count is what is left once the work has ended, not a sample
    taken up to 50 ms before."""
    nc = await nats.connect(url)
    counts: list[int] = []
    try:
        js = nc.jetstream()

        async def sample() -> None:
            try:
                counts.append((await js.stream_info(bus.subjects.RESULTS_STREAM)).state.messages)
            except nats.js.errors.NotFoundError:
                counts.append(0)  # no stream (yet): nothing stored

        while not until.is_set():
            await sample()
            await asyncio.sleep(0.05)
        await sample()
    finally:
        await nc.close()
    return counts


def weather_rows(count: int) -> list[bytes]:
    lines = (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()
    return [json.dumps({**json.loads(lines[i % len(lines)]), "_rowidx": i}).encode() for i in range(count)]


async def post_all(port: int, rows: list[bytes]) -> list[int]:
    """Every row's `/run`, `IN_FLIGHT` at a time, as a trainer's client posts a step's rows."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    async with aiohttp.ClientSession() as session:

        async def post(row: bytes) -> int:
            async with gate, session.post(f"http://127.0.0.1:{port}/run", data=row) as reply:
                await reply.read()
                return reply.status

        return await asyncio.gather(*(post(row) for row in rows))


def environment_server_port(head: int, name: str) -> int:
    """The port of server `name`, from the head server's config, as NeMo Gym's clients find it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{head}/global_config_dict_yaml", timeout=10) as reply:
        config = yaml.safe_load(json.loads(reply.read()))
    (instance,) = next(iter(config[name].values())).values()
    return int(instance["port"])


def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).close()
            return
        except OSError:
            time.sleep(0.2)


def test_the_fronts_answered_runs_leave_no_result_on_the_bus(own_server: str, tmp_path: Path) -> None:
    """2,000 `/run`s, 64 at a time: the results stream never holds more than the requests in
    flight plus those answered since the run's last purge began (the bound: twice
    `IN_FLIGHT`; a purge takes milliseconds), and holds none once all are answered."""
    worker = spawn(["serve", WEATHER, WEATHER_AGENT, "offline"], own_server, tmp_path / "worker.log")
    port = free_port()
    front = spawn(["front", WEATHER_AGENT, "--port", str(port)], own_server, tmp_path / "front.log")
    try:
        wait_listening(port, front, tmp_path / "front.log")
        run_at = environment_server_port(port, f"{WEATHER_AGENT}_environment_server")

        async def measured() -> tuple[list[int], list[int], int]:
            done = asyncio.Event()
            watching = asyncio.create_task(stored_results(own_server, done))
            statuses = await post_all(run_at, weather_rows(ROWS))
            await asyncio.sleep(0.5)  # the last acks land
            done.set()
            counts = await watching
            return statuses, counts, counts[-1]

        statuses, counts, left = asyncio.run(measured())
    finally:
        stop(front)
        stop(worker)
    print(f"{ROWS} /runs: at most {max(counts)} results stored at once ({len(counts)} samples); {left} left")
    assert statuses == [200] * ROWS
    assert max(counts) <= 2 * IN_FLIGHT
    assert left == 0


def test_a_collection_keeps_only_its_unwritten_results_on_the_bus(own_server: str, tmp_path: Path) -> None:
    """`collect` of 2,000 rollouts with 64 in flight: the results stream holds at most
    `--concurrency` rollouts in flight (a rollout's slot is given back once its row is
    written and its result acked) plus those acked since the run's last purge began (the
    bound: twice `--concurrency`), and none once it has ended."""
    worker = spawn(["serve", WEATHER, WEATHER_AGENT, "offline"], own_server, tmp_path / "worker.log")
    source = tmp_path / "rows.jsonl"
    source.write_bytes(b"\n".join(weather_rows(ROWS)) + b"\n")
    out = tmp_path / "out.jsonl"

    async def measured() -> tuple[int, list[int]]:
        done = asyncio.Event()
        watching = asyncio.create_task(stored_results(own_server, done))
        args = [
            "collect",
            "-i",
            str(source),
            "-o",
            str(out),
            "--agent",
            WEATHER_AGENT,
            "--concurrency",
            str(IN_FLIGHT),
        ]
        env = {**os.environ, "NATS_URL": own_server}
        process = await asyncio.create_subprocess_exec(*RUNNER, *args, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.PIPE)  # fmt: skip
        _, err = await process.communicate()
        done.set()
        assert process.returncode == 0, err.decode()[-3000:]
        return process.returncode, await watching

    try:
        asyncio.run(bus_ready(own_server))
        _, counts = asyncio.run(measured())
    finally:
        stop(worker)
    written = len(out.read_text().splitlines())
    print(
        f"collect of {ROWS}: at most {max(counts)} results stored at once ({len(counts)} samples); {counts[-1]} left"
    )
    assert written == ROWS
    assert max(counts) <= 2 * IN_FLIGHT
    assert counts[-1] == 0


async def bus_ready(url: str) -> None:
    nc = await bus.connect(url, name="test")
    try:
        await bus.wait_served(nc, [WEATHER, WEATHER_AGENT, "policy"], timeout=120)
    finally:
        await nc.close()


def test_a_worker_collect_started_that_is_killed_is_replaced_and_no_rollout_is_lost(tmp_path: Path) -> None:
    """`collect` on the embedded default with one worker process: SIGKILLed while it runs
    rollouts, it is replaced (said on the terminal), the rollouts it held come back by
    redelivery, and every rollout is written once."""
    fake = FakeOpenAI(delay=0.5)
    server = ServerThread(fake.app())
    fake.url = server.start() + "/v1"
    out = tmp_path / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    args = ["collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(out), "--agent", WEATHER_AGENT,
            "--num-repeats", "4", "--workers", "1", "--model-url", fake.url, "--model", "fake", "--model-api", "chat"]  # fmt: skip
    process = subprocess.Popen(
        [*RUNNER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(fake.requests) < 3:  # rollouts are in flight on the worker
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        (victim,) = [p for p in psutil.Process(process.pid).children() if "serve" in p.cmdline()]
        victim.kill()
        _, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        server.stop()
    assert process.returncode == 0, err[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows) == [
        (task, rollout) for task in range(5) for rollout in range(4)
    ]
    assert max(r["_gymbus"]["delivery"] for r in rows) >= 2
    assert "replaced a worker process" in err, err[-3000:]
