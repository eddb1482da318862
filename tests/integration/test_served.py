"""Whether a function is served, read from its `$SRV.PING` against a real nats-server: busy is
not dead."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from gymbus import bus
from gymbus.bus import Connection
from gymbus.bus.wire import subjects


async def test_a_worker_that_answers_its_ping_late_is_served_and_one_not_subscribed_is_not(
    nc: Connection,
) -> None:
    async def busy(msg: Msg) -> None:
        await asyncio.sleep(3)  # its loop is taken by the calls it runs: the answer comes late
        await msg.respond(b"{}")

    await nc.client.subscribe(subjects.service_ping("busy_function"), cb=busy)
    await nc.client.flush()
    assert await bus.is_served(nc, "busy_function", timeout=0.2)
    assert not await bus.is_served(nc, "nobody_serves_this", timeout=0.2)
    assert await bus.served_within(nc, ["busy_function", "nobody_serves_this"], timeout=0.0) == {
        "busy_function"
    }
