"""`gym-runner serve --replicas 2`: both replicas take requests; `status` lists both with counts
(an agent's tasks from the queue included)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gymbus import bus
from gymbus.bus import Connection

RUNNER = [sys.executable, "-m", "gymbus.runner"]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "example_single_tool_call.jsonl"


async def test_replicas_share_a_subject_and_status_lists_both(nats_url: str, nc: Connection) -> None:
    env = {**os.environ, "NATS_URL": nats_url}
    command = [sys.executable, "-m", "gymbus.runner", "serve", "example_single_tool_call", "--replicas", "2"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)  # noqa: ASYNC220 - a child to test, not awaited work
    try:
        deadline = time.monotonic() + 30
        while len(await bus.service_infos(nc, "example_single_tool_call", window=0.2)) < 2:
            assert time.monotonic() < deadline, "replicas did not start"
        subject = bus.subjects.env_tool("example_single_tool_call", "get_weather")
        await asyncio.gather(*(bus.request(nc, subject, b'{"city": "Rome"}', timeout=5) for _ in range(200)))
        status = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gymbus.runner", "status", "--json"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert status.returncode == 0, status.stderr
        replicas = [
            f for f in json.loads(status.stdout)["functions"] if f["name"] == "example_single_tool_call"
        ]
        counts = [
            next(e["num_requests"] for e in r["endpoints"] if e["name"] == "get_weather") for r in replicas
        ]
        assert len(replicas) == 2 and sum(counts) == 200 and min(counts) > 0
        table = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gymbus.runner", "status"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert table.stdout.count("gym.env.example_single_tool_call.tool.get_weather") == 2
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0


async def test_agent_replicas_report_the_tasks_they_ran(
    nats_url: str, nc: Connection, tmp_path: Path
) -> None:
    agent = "example_single_tool_call_simple_agent"
    js = nc.js
    await bus.run.ensure_streams(nc)
    await js.purge_stream(
        bus.subjects.TASKS_STREAM, subject=bus.subjects.tasks(agent)
    )  # earlier tests' leftovers
    env = {**os.environ, "NATS_URL": nats_url}
    functions = ["example_single_tool_call", agent, "offline"]
    command = [sys.executable, "-m", "gymbus.runner", "serve", *functions, "--replicas", "2"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)  # noqa: ASYNC220 - a child to test, not awaited work
    try:
        deadline = time.monotonic() + 30
        while len(await bus.service_infos(nc, agent, window=0.2)) < 2:
            assert time.monotonic() < deadline, "replicas did not start"
        output = tmp_path / "out.jsonl"
        collect = await asyncio.to_thread(
            subprocess.run,
            [*RUNNER, "collect", "-i", str(EXAMPLE), "-o", str(output), "--agent", agent, "--num-repeats", "8"],
            check=False, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert collect.returncode == 0, collect.stderr
        rollouts = len(output.read_text().splitlines())
        stats = await bus.service_stats(nc, agent, window=0.3)
        tasks = [e for s in stats for e in s.endpoints if e.name == "tasks"]
        assert len(stats) == 2 and len(tasks) == 2 and rollouts == 40
        assert {t.subject for t in tasks} == {bus.subjects.tasks(agent)}
        assert sum(t.num_requests for t in tasks) == rollouts and all(t.num_errors == 0 for t in tasks)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0


async def test_a_replica_that_dies_is_replaced(nats_url: str, nc: Connection, tmp_path: Path) -> None:
    """`serve --replicas 2` supervises its processes: one SIGKILLed is replaced (said in its
    log), and both serve again; a stop still ends them all, exit 0."""
    import psutil

    env = {**os.environ, "NATS_URL": nats_url}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        command = [*RUNNER, "serve", "example_single_tool_call", "--replicas", "2"]
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: ASYNC220 - a child to test
    try:
        deadline = time.monotonic() + 60
        while len(await bus.service_infos(nc, "example_single_tool_call", window=0.2)) < 2:
            assert time.monotonic() < deadline, f"replicas did not start:\n{log.read_text()}"
        first = [p for p in psutil.Process(server.pid).children() if "serve" in p.cmdline()]
        first[0].kill()
        while (
            "replaced a worker process" not in log.read_text()
            or len(await bus.service_infos(nc, "example_single_tool_call", window=0.2)) < 2
        ):
            assert time.monotonic() < deadline + 30, f"no replacement:\n{log.read_text()}"
            await asyncio.sleep(0.2)
        now = {p.pid for p in psutil.Process(server.pid).children() if "serve" in p.cmdline()}
        assert len(now) == 2 and first[0].pid not in now
    finally:
        server.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(server.wait, 30) == 0
