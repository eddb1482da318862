"""The run protocol's client on a real nats-server: a run that ends withdraws the tasks it
queued and no result answered, so no worker spends rollouts on it afterwards; a run kept
for resuming leaves them queued."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from gymbus import bus
from gymbus.bus import Connection, RunClient, TaskConsumer, subjects


async def queued(nc: Connection, agent: str) -> int:
    """Messages of `agent`'s work queue the stream still holds."""
    info = await nc.js.stream_info(subjects.TASKS_STREAM, subjects_filter=subjects.tasks(agent))
    return sum((info.state.subjects or {}).values())


async def submit(client: RunClient, agent: str, seqs: range) -> None:
    for seq in seqs:
        await client.submit(agent, b'{"responses_create_params": {"input": "hi"}}', seq, 0, time.time() + 60)
    await client.wait_submitted()


async def test_a_run_that_ends_withdraws_its_unanswered_tasks_and_only_those(nc: Connection) -> None:
    agent = f"withdrawn_{uuid.uuid4().hex[:8]}"

    async def echo(row: bytes, headers: Mapping[str, str]) -> bytes:
        return b'{"reward": 1.0}'

    worker = TaskConsumer(nc, agent, echo)
    await worker.start()
    client = await RunClient.open(bus.Bus.over(nc), f"r{uuid.uuid4().hex}")
    try:
        await submit(client, agent, range(3))
        answered: list[int] = []
        async for results in client.results():
            answered += [result.seq for result in results]
            await client.ack(results)
            if len(answered) == 3:
                break
        await worker.stop()  # no one takes the next tasks: they wait in the queue
        await submit(client, agent, range(3, 7))
        assert await queued(nc, agent) == 4
    finally:
        withdrawn = await client.withdraw()
        await client.close(forget=True)
    assert sorted(answered) == [0, 1, 2]
    assert withdrawn == 4  # the answered three were not asked about again
    assert await queued(nc, agent) == 0


async def test_a_run_kept_for_resuming_leaves_its_tasks_queued(nc: Connection) -> None:
    agent = f"kept_{uuid.uuid4().hex[:8]}"
    await bus.run.ensure_streams(nc)
    client = await RunClient.open(bus.Bus.over(nc), f"r{uuid.uuid4().hex}")
    try:
        await submit(client, agent, range(5))
    finally:
        await client.close(forget=False)
    assert await queued(nc, agent) == 5
    withdrawing = await RunClient.open(bus.Bus.over(nc), f"r{uuid.uuid4().hex}")
    await submit(withdrawing, agent, range(2))
    await withdrawing.close(forget=True)
    assert await queued(nc, agent) == 5  # another run's close took only its own two
