"""A real 3-node NATS cluster (JetStream R3): a collection survives losing a server mid-run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import faults
from bench._cluster import WEATHER, WEATHER_AGENT, NatsServers, count_lines, tally, wait_until
from gymbus import schemas

pytestmark = pytest.mark.timeout(120)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
TASKS = 1500
KILLED = 1  # the node the second worker is attached to


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[NatsServers]:
    with NatsServers(tmp_path, size=3) as running:
        yield running


def _spawn(args: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    env = {**clean, "NATS_URL": url, "GYMBUS_REPLICAS": "3"}
    with open(log, "ab") as out:
        return subprocess.Popen([*RUNNER, *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def _stream_replicas(servers: NatsServers) -> dict[str, int]:
    """Replica count of every stream, from a server's monitoring view of JetStream."""
    import asyncio

    from gymbus import bus

    async def read() -> dict[str, int]:
        nc = await bus.connect(servers.url(0), name="test")
        try:
            js = nc.js
            return {info.config.name or "": info.config.num_replicas or 1 for info in await js.streams_info()}
        finally:
            await nc.close()

    return asyncio.run(read())


def test_workers_started_with_the_cluster_set_up_once_it_has_settled(tmp_path: Path) -> None:
    """Three workers connect while the cluster is still electing its leader: each one's
    streams, buckets and consumers are made once the cluster can (not an error at start)."""
    import asyncio

    from gymbus import bus

    async def set_up(url: str) -> None:
        nc = await bus.connect(url, name="test", replicas=3)
        try:
            await bus.hosting.KvSessions.open(nc, WEATHER)
            await bus.run.ensure_streams(nc)
            await bus.run.add_results_consumer(
                nc, "settling", schemas.DEFAULT_LIMITS, schemas.DEFAULT_TIMEOUTS
            )
        finally:
            await nc.close()

    async def all_three(servers: NatsServers) -> list[BaseException | None]:
        return await asyncio.gather(*(set_up(servers.url(node)) for node in range(3)), return_exceptions=True)

    servers = NatsServers(tmp_path, size=3)
    try:
        servers.launch()
        wait_until(lambda: all(_listening(port) for port in servers.ports), 30, "the servers' ports")
        assert asyncio.run(all_three(servers)) == [None, None, None]
        assert _stream_replicas(servers)["KV_gym_sessions"] == 3
    finally:
        servers.stop()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_collection_survives_losing_one_of_three_servers(servers: NatsServers, tmp_path: Path) -> None:
    source, args, keys = faults.weather_tasks(tmp_path, TASKS)
    worker_args = ["serve", WEATHER, WEATHER_AGENT, "offline", "--ack-wait", "3", "--concurrency", "64"]
    # Each worker is given one node (it learns the others from it); the runner all three.
    workers = [
        _spawn(worker_args, servers.url(node), tmp_path / f"worker{node}.log") for node in (0, KILLED, 2)
    ]
    try:
        for node in (0, KILLED, 2):
            log = tmp_path / f"worker{node}.log"
            wait_until(lambda log=log: "ready:" in log.read_text(errors="replace"), 60, f"worker on n{node}")
        out = tmp_path / "out.jsonl"
        runner = _spawn(["collect", "-i", str(source), "-o", str(out), *args, "--concurrency", "64"],
                        servers.urls, tmp_path / "runner.log")  # fmt: skip
        wait_until(lambda: count_lines(out) >= 150 or runner.poll() is not None, 60, "150 rollouts")
        servers.kill(KILLED)
        landed = faults.running_with_work_left(runner, out, len(keys))
        assert runner.wait(90) == 0, (tmp_path / "runner.log").read_text()[-3000:]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    result = tally(out, keys)
    assert landed, "the server was killed after the run had written everything"
    assert (result.lost, result.duplicated) == (0, 0), result
    assert result.written + result.failed == len(keys)
    assert result.failed == 0, result.failure_classes
    replicas = _stream_replicas(servers)
    assert replicas["GYM_TASKS"] == replicas["GYM_RESULTS"] == 3, replicas
