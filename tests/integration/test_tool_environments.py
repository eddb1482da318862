"""The tool-using environments on a real bus: session state in KV outlives the replica that
wrote it, bad tool calls are readable errors, and the example rows collect with the offline
policy (what it scores there is not asserted: it is a scripted stand-in, not a solver)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gymbus import bus, schemas
from gymbus.bus import Connection, ServeOptions, environment_service, serve_functions
from gymbus.bus.hosting import BusCalls
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.runner import CollectOptions, ProgressView, collect
from gymbus.schemas import Item, Response
from tests.conftest import EXAMPLES

COUNTER = "example_session_state_mgmt"
COUNTER_AGENT = "example_session_state_mgmt_simple_agent"
TOOL_ENVIRONMENTS = ("example_multi_step", "math_advanced_calculations", COUNTER)
QUICK = schemas.Timeouts(seed=10, tool=10, verify=10)
EMPTY = Response(id="r", created_at=0, model="m", output=[])


def counter_row() -> bytes:
    return (EXAMPLES / f"{COUNTER}.jsonl").read_bytes().splitlines()[0]  # 3, add 1, add 2 → 6


def replica(nats_url: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gymbus.runner", "serve", COUNTER]
    env = {**os.environ, "NATS_URL": nats_url}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)


async def wait_for_replicas(nc: Connection, count: int) -> set[str]:
    """The ids of the live replicas of the counter environment, once there are `count`."""
    deadline = time.monotonic() + 30
    while True:
        ids = {info.id for info in await bus.service_infos(nc, COUNTER, window=0.2)}
        if len(ids) == count:
            return ids
        assert time.monotonic() < deadline, f"expected {count} replicas, found {len(ids)}"


async def requests_served(nc: Connection, replica_id: str, endpoint: str) -> int:
    for stats in await bus.service_stats(nc, COUNTER, window=0.2):
        if stats.id == replica_id:
            return next(e.num_requests for e in stats.endpoints if e.name == endpoint)
    raise AssertionError(f"replica {replica_id} is not live")


def counter_calls(nc: Connection, session: str) -> BusCalls:
    return BusCalls(nc, AGENTS[COUNTER_AGENT], session, deadline=time.time() + 120, timeouts=QUICK)


async def test_session_state_survives_the_replica_that_seeded_it(nc: Connection, nats_url: str) -> None:
    calls = counter_calls(nc, f"kill-{uuid.uuid4().hex}")
    first = replica(nats_url)
    second = None
    try:
        [first_id] = await wait_for_replicas(nc, 1)
        await calls.seed(counter_row())  # initial_count 3; only the first replica is up
        assert await calls.tool("increment_counter", '{"count": 1}') == '{"success":true}'
        assert await requests_served(nc, first_id, "seed") == 1
        second = replica(nats_url)
        [second_id] = await wait_for_replicas(nc, 2) - {first_id}
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        assert await wait_for_replicas(nc, 1) == {second_id}
        assert await calls.tool("increment_counter", '{"count": 2}') == '{"success":true}'
        assert await calls.tool("get_counter_value", "{}") == '{"count":6}'
        verdict = json.loads(await calls.verify(counter_row(), EMPTY))
        assert verdict["reward"] == 1.0
        assert await requests_served(nc, second_id, "verify") == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)


@pytest.fixture
async def tool_environments(host: bus.ServiceHost, nc: Connection) -> AsyncIterator[bus.ServiceHost]:
    """The three environments, served in this process with their state in KV."""
    for name in TOOL_ENVIRONMENTS:
        state = await bus.hosting.KvSessions.open(nc, name)
        await host.add(environment_service(ENVIRONMENTS[name], state, nc, QUICK))
    yield host


async def test_bad_tool_calls_are_readable_errors_and_the_worker_keeps_serving(
    tool_environments: bus.ServiceHost, nc: Connection
) -> None:
    calls = counter_calls(nc, f"bad-{uuid.uuid4().hex}")
    with pytest.raises(schemas.NotFound, match="never seeded, or it expired"):
        await calls.tool("increment_counter", '{"count": 1}')
    await calls.seed(counter_row())
    with pytest.raises(schemas.NotFound, match="has no tool named 'reset_counter'"):
        await calls.tool("reset_counter", "{}")
    with pytest.raises(schemas.BadRequest, match="missing required field `count`"):
        await calls.tool("increment_counter", "{}")
    with pytest.raises(schemas.BadRequest, match="Expected `int`, got `str`"):
        await calls.tool("increment_counter", '{"count": "two"}')
    assert await calls.tool("get_counter_value", "{}") == '{"count":3}'
    lost = counter_calls(nc, f"lost-{uuid.uuid4().hex}")  # no counter in KV: the rollout is replayed
    assert json.loads(await lost.verify(counter_row(), EMPTY)) == {"reward": 0.0}  # no calls: 3, not 6
    added = [
        Item(type="function_call", call_id="c", name="increment_counter", arguments='{"count": 3}'),
        Item(type="function_call_output", call_id="c", output='{"success":true}'),
    ]
    replayed = Response(id="r", created_at=0, model="m", output=added)
    assert json.loads(await lost.verify(counter_row(), replayed)) == {"reward": 1.0}  # 3 + 3 = 6
    math = BusCalls(nc, AGENTS["math_advanced_calculations_simple_agent"], "m", time.time() + 60, QUICK)
    with pytest.raises(schemas.BadRequest, match="divide: float division by zero"):
        await math.tool("divide", '{"a": 1.0, "b": 0.0}')
    assert await math.tool("divide", '{"a": 1.0, "b": 4.0}') == '{"solution":0.125}'


def mixed_rows(path: Path) -> None:
    """Every example row of the three environments in one file, each naming its agent."""
    lines = []
    for name in TOOL_ENVIRONMENTS:
        for line in (EXAMPLES / f"{name}.jsonl").read_text().splitlines():
            row: dict[str, Any] = json.loads(line)
            row["agent_ref"] = {"type": "responses_api_agents", "name": f"{name}_simple_agent"}
            lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")


async def wait_until_served(nc: Connection, subjects: set[str]) -> None:
    deadline = time.monotonic() + 30
    while not subjects <= await bus.connection.served_subjects(nc, window=0.2):
        assert time.monotonic() < deadline, "the workers did not start"


async def test_the_example_rows_collect_and_verify_through_the_bus(
    nc: Connection, nats_url: str, tmp_path: Path
) -> None:
    agent_names = [f"{name}_simple_agent" for name in TOOL_ENVIRONMENTS]
    stop = asyncio.Event()
    options = ServeOptions(functions=(*TOOL_ENVIRONMENTS, *agent_names, "offline"))
    workers = asyncio.create_task(serve_functions(options, nats_url, stop))
    try:
        mixed_rows(tmp_path / "tools.jsonl")
        served = {bus.subjects.agent_run(name) for name in agent_names} | {
            bus.subjects.model_responses("policy")
        }
        await wait_until_served(nc, served)
        result = await collect(
            CollectOptions(input=tmp_path / "tools.jsonl", output=tmp_path / "out.jsonl", nats_url=nats_url),
            ProgressView(),
            asyncio.Event(),
        )
    finally:
        stop.set()
        await workers
    assert (result.written, result.failed, result.planned) == (15, 0, 15)
    rollouts = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    by_agent: dict[str, int] = {}
    for rollout in rollouts:
        by_agent[rollout["agent_ref"]["name"]] = by_agent.get(rollout["agent_ref"]["name"], 0) + 1
        assert 0.0 <= rollout["reward"] <= 1.0
        outputs = [item for item in rollout["response"]["output"] if item["type"] == "function_call_output"]
        assert outputs and "never seeded" not in json.dumps(outputs)  # the calls reached seeded sessions
    assert by_agent == {f"{name}_simple_agent": 5 for name in TOOL_ENVIRONMENTS}
    assert all(
        "parsed_synonym_values" in r for r in rollouts if r["agent_ref"]["name"].startswith("example_multi")
    )
