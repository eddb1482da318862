"""A trainer's batches through the durable task queue, on a real nats-server: one row per
task, in order, whatever happens to the rollouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace

import msgspec
import pytest

from gymbus.bus import (
    Bus,
    Connection,
    ServeOptions,
    ServiceHost,
    ServiceSpec,
    serve_functions,
    subjects,
    wait_served,
)
from gymbus.runner.training._batches import BatchTask, TaskBatches
from gymbus.schemas import DEFAULT_TIMEOUTS, MSG_ID, ROLLOUT_INDEX, SEQ, TASK_INDEX, Rollout
from tests.conftest import WEATHER, WEATHER_AGENT


@pytest.fixture
async def weather_worker(nats_url: str, nc: Connection) -> AsyncIterator[None]:
    """The weather environment, its agent and the offline policy, hosted in this process."""
    stop = asyncio.Event()
    options = ServeOptions(functions=(WEATHER, WEATHER_AGENT, "offline"))
    serving = asyncio.create_task(serve_functions(options, nats_url, stop))
    await wait_served(nc, [WEATHER_AGENT], timeout=30)
    yield
    stop.set()
    await serving


def task(row: bytes, index: int, agent: str = WEATHER_AGENT) -> BatchTask:
    fields = {**json.loads(row), TASK_INDEX: index, ROLLOUT_INDEX: 0}
    return BatchTask(agent, json.dumps(fields).encode())


async def test_every_task_comes_back_once_in_order(
    nc: Connection, weather_worker: None, weather_rows: list[bytes]
) -> None:
    tasks = [task(weather_rows[i % len(weather_rows)], i) for i in range(12)]
    rows = await TaskBatches(Bus.over(nc), rollout_timeout=60).run(tasks)
    rollouts = [msgspec.json.decode(row, type=Rollout) for row in rows]
    assert [rollout.task_index for rollout in rollouts] == list(range(12))
    assert all(rollout.failure_class is msgspec.UNSET and rollout.reward == 1.0 for rollout in rollouts)


async def test_a_second_batch_reads_only_its_own_results(
    nc: Connection, weather_worker: None, weather_rows: list[bytes]
) -> None:
    batches = TaskBatches(Bus.over(nc), rollout_timeout=60)
    first = await batches.run([task(weather_rows[0], 0)])
    second = await batches.run([task(weather_rows[1], 1), task(weather_rows[2], 2)])
    assert [msgspec.json.decode(row, type=Rollout).task_index for row in first + second] == [0, 1, 2]


async def test_a_row_whose_agent_nobody_serves_fails_after_a_wait(
    nc: Connection, weather_rows: list[bytes]
) -> None:
    timeouts = replace(DEFAULT_TIMEOUTS, worker_start=0.5)
    rows = await TaskBatches(Bus.over(nc), rollout_timeout=60, timeouts=timeouts).run(
        [task(weather_rows[0], 7, "nobody_agent")]
    )
    rollout = msgspec.json.decode(rows[0], type=Rollout)
    assert (rollout.failure_class, rollout.task_index, rollout.reward) == ("no_worker", 7, 0.0)
    assert "gym.agent.nobody_agent.run" in str(rollout.failure_message)


async def test_a_rollout_past_its_deadline_fails_without_holding_the_batch(
    nc: Connection, weather_rows: list[bytes]
) -> None:
    # Served (it answers pings) but never takes a task: nothing ever comes back.
    host = ServiceHost(nc)
    await host.add(ServiceSpec("silent_agent", "agent", ()))
    try:
        batches = TaskBatches(Bus.over(nc), rollout_timeout=0.5, grace=0.5)
        started = asyncio.get_running_loop().time()
        rows = await batches.run([task(weather_rows[0], 3, "silent_agent")])
        assert asyncio.get_running_loop().time() - started < 10
    finally:
        await host.stop()
    rollout = msgspec.json.decode(rows[0], type=Rollout)
    assert (rollout.failure_class, rollout.task_index) == ("deadline_exceeded", 3)


async def test_a_result_without_its_tasks_signature_is_dropped(
    nc: Connection, weather_rows: list[bytes]
) -> None:
    host = ServiceHost(nc)
    await host.add(ServiceSpec("silent_agent", "agent", ()))  # takes no task: only a forger answers
    batches = TaskBatches(Bus.over(nc), rollout_timeout=1.0, grace=0.5)
    forged = json.dumps({**json.loads(weather_rows[0]), "reward": 1.0, "response": None}).encode()

    async def forge() -> None:
        await asyncio.sleep(0.3)
        headers = {SEQ: "0", MSG_ID: "forged"}
        await nc.js.publish(subjects.results(f"{batches.prefix}-0"), forged, headers=headers)

    try:
        rows, _ = await asyncio.gather(batches.run([task(weather_rows[0], 4, "silent_agent")]), forge())
    finally:
        await host.stop()
    assert msgspec.json.decode(rows[0], type=Rollout).failure_class == "deadline_exceeded"
    assert batches.forged == 1
