"""`bus.request` against a real nats-server: what a connection leaves behind once closed."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest
from nats.aio.msg import Msg

from gymbus import bus, schemas
from gymbus.bus import Connection
from gymbus.bus.wire._request import WATCH_TASK


def watchers() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task.get_name().startswith(WATCH_TASK)}


async def echo(msg: Msg) -> None:
    await msg.respond(msg.data)


async def ignore(msg: Msg) -> None:
    pass


async def test_a_closed_connection_stops_its_silence_watcher_and_is_freed(
    nc: Connection, nats_url: str
) -> None:
    await nc.client.subscribe("test.request.echo", cb=echo)
    await nc.client.flush()
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
    nc: Connection, nats_url: str
) -> None:
    await nc.client.subscribe("test.request.never", cb=ignore)
    await nc.client.flush()
    client = await bus.connect(nats_url, name="closing")
    waiting = asyncio.create_task(bus.request(client, "test.request.never", b"", timeout=60, silence=60))
    await asyncio.sleep(0.2)
    await client.close()
    with pytest.raises(schemas.BusUnavailable):
        await asyncio.wait_for(waiting, timeout=5)


class SlowResponder:
    """Answers `subject` on a connection of its own, in a thread of its own (so the test's
    loop can be held without holding it): keep-alives `gaps` seconds apart, then the reply."""

    def __init__(self, url: str, subject: str, gaps: list[float]) -> None:
        self.url, self.subject, self.gaps = url, subject, gaps
        self.ready = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def __enter__(self) -> SlowResponder:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)

    async def _serve(self) -> None:
        client = await bus.connect(self.url, name="slow responder")

        async def answer(msg: Msg) -> None:
            for gap in self.gaps:
                await asyncio.sleep(gap)
                await client.client.publish(msg.reply, b"", headers={schemas.WORKING: "1"})
            await msg.respond(b"done")

        await client.client.subscribe(self.subject, cb=answer)
        await client.client.flush()
        self.ready.set()
        while not self.done.is_set():
            await asyncio.sleep(0.05)
        await client.close()


async def test_a_requester_whose_own_loop_was_held_does_not_call_its_worker_silent(
    nc: Connection, nats_url: str
) -> None:
    with SlowResponder(nats_url, "test.request.held", gaps=[0.5] * 12):
        waiting = asyncio.create_task(bus.request(nc, "test.request.held", b"", timeout=30, silence=2))
        await asyncio.sleep(0.5)
        time.sleep(4)  # this process computes; the worker's keep-alives wait unread
        assert await waiting == b"done"


async def test_a_worker_whose_keep_alives_come_late_is_given_longer(nc: Connection, nats_url: str) -> None:
    with SlowResponder(nats_url, "test.request.late", gaps=[1.5, 3.0, 3.0]):
        assert await bus.request(nc, "test.request.late", b"", timeout=30, silence=2) == b"done"
    with SlowResponder(nats_url, "test.request.gone", gaps=[0.5, 30.0]):  # a long gap is still silence
        with pytest.raises(schemas.RequestTimeout, match="no sign of work"):
            await bus.request(nc, "test.request.gone", b"", timeout=30, silence=2)
