"""`bus.request` against a real nats-server: what a connection leaves behind once closed."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gymbus import bus
from gymbus import schemas
from gymbus.bus.wire._request import WATCH_TASK


def watchers() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task.get_name().startswith(WATCH_TASK)}


async def echo(msg: Msg) -> None:
    await msg.respond(msg.data)


async def ignore(msg: Msg) -> None:
    pass


async def test_a_closed_connection_stops_its_silence_watcher_and_is_freed(nc: Client, nats_url: str) -> None:
    await nc.subscribe("test.request.echo", cb=echo)
    await nc.flush()
    before = watchers()
    client = await bus.connect(nats_url, name="closing")
    assert await bus.request(client, "test.request.echo", b"hi", timeout=5) == b"hi"
    (watcher,) = watchers() - before
    await client.close()
    await asyncio.wait_for(asyncio.shield(watcher), timeout=5)  # it ends, rather than waking forever
    closed = weakref.ref(client)
    del client
    gc.collect()
    assert closed() is None  # nothing keeps the closed client alive


async def test_a_request_waiting_when_its_connection_closes_fails_as_bus_unavailable(
    nc: Client, nats_url: str
) -> None:
    await nc.subscribe("test.request.never", cb=ignore)
    await nc.flush()
    client = await bus.connect(nats_url, name="closing")
    waiting = asyncio.create_task(bus.request(client, "test.request.never", b"", timeout=60, silence=60))
    await asyncio.sleep(0.2)
    await client.close()
    with pytest.raises(schemas.BusUnavailable):
        await asyncio.wait_for(waiting, timeout=5)
