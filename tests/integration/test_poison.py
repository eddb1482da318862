"""Poison on the task queue: every task that reaches an agent ends as a result, and one that
no worker ever finishes becomes a failure row too, instead of vanishing."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from gymbus.bus import Connection, ServeOptions, serve_functions, subjects
from gymbus.bus.hosting import agent_consumer
from gymbus.bus.run import ExhaustedTasks, ensure_streams, task_headers
from tests.conftest import WEATHER, WEATHER_AGENT

pytestmark = pytest.mark.timeout(60)

POISON = [
    b'{"responses_create_params": {"input": "hi"}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"[" * 100_000,
    b"\xde\xad\xbe\xef",
    b"[1, 2, 3]",
    b'{"no_params": true}',
]


async def results_of(nc: Connection, run: str) -> list[Msg]:
    received: list[Msg] = []

    async def keep(msg: Msg) -> None:
        received.append(msg)

    await nc.client.subscribe(subjects.results(run), cb=keep)
    await nc.client.flush()
    return received


async def test_every_poison_task_ends_as_a_failure_row_and_is_acknowledged(
    nc: Connection, nats_url: str
) -> None:
    js = nc.js
    await ensure_streams(nc)
    run = f"rpoison{int(time.time())}"
    received = await results_of(nc, run)
    stop = asyncio.Event()
    workers = asyncio.create_task(
        serve_functions(ServeOptions(functions=(WEATHER, WEATHER_AGENT, "offline")), nats_url, stop)
    )
    try:
        for seq, body in enumerate(POISON):
            await js.publish(
                subjects.tasks(WEATHER_AGENT), body, headers=task_headers(run, seq, 0, time.time() + 60)
            )
        deadline = time.monotonic() + 20
        while len(received) < len(POISON) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        consumer = await js.consumer_info(subjects.TASKS_STREAM, agent_consumer(WEATHER_AGENT))
    finally:
        stop.set()
        await workers
    assert sorted(int((msg.headers or {})["Gym-Seq"]) for msg in received) == list(range(len(POISON)))
    rows = {int((msg.headers or {})["Gym-Seq"]): json.loads(msg.data) for msg in received}
    assert {row["_ng_failure_class"] for row in rows.values()} == {"invalid_input"}
    assert "nests deeper than 128 levels" in rows[0]["_ng_failure_message"]
    assert consumer.num_ack_pending == 0 and consumer.num_pending == 0  # all acknowledged


async def test_a_task_no_worker_ever_finishes_is_reported_once_its_deliveries_run_out(nc: Connection) -> None:
    js = nc.js
    await ensure_streams(nc)
    agent = f"dies_on_it_{int(time.time())}"
    config = ConsumerConfig(
        durable_name=agent_consumer(agent),
        filter_subject=subjects.tasks(agent),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=0.5,
        max_deliver=2,
    )
    await js.add_consumer(subjects.TASKS_STREAM, config)
    given_up: list[tuple[int, int]] = []
    run = f"rdead{int(time.time())}"
    await ExhaustedTasks(nc, run, lambda seq, deliveries: given_up.append((seq, deliveries))).start()
    ack = await js.publish(subjects.tasks(agent), b"{}", headers=task_headers(run, 7, 0, time.time() + 60))
    worker = await js.pull_subscribe_bind(durable=agent_consumer(agent), stream=subjects.TASKS_STREAM)
    deadline = time.monotonic() + 20
    while not given_up and time.monotonic() < deadline:
        try:
            await worker.fetch(1, timeout=0.5)  # taken, never acknowledged: its worker "dies" on it
        except TimeoutError:
            pass
    assert given_up == [(7, 2)]
    await asyncio.sleep(0.2)
    with pytest.raises(Exception, match="no message found|NotFound"):
        await js.get_msg(subjects.TASKS_STREAM, ack.seq)  # deleted: it no longer sits in the queue
    await worker.unsubscribe()
    await js.delete_consumer(subjects.TASKS_STREAM, agent_consumer(agent))
