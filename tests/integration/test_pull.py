"""The continuous puller stops when told, whatever else happens in the same instant."""

from __future__ import annotations

import asyncio

from nats.js.api import AckPolicy, ConsumerConfig

from gymbus import bus
from gymbus.bus import Connection


async def test_stop_ends_the_puller_even_when_it_is_woken_at_the_same_moment(nc: Connection) -> None:
    js = nc.js
    await bus.run.ensure_streams(nc)
    config = ConsumerConfig(
        durable_name="pull-stop-test",
        filter_subject=bus.subjects.results("pullstoptest"),
        ack_policy=AckPolicy.EXPLICIT,
        inactive_threshold=60,
    )
    await js.add_consumer(bus.subjects.RESULTS_STREAM, config)
    puller = bus.run.Puller(
        nc, bus.subjects.RESULTS_STREAM, "pull-stop-test", capacity=8, on_message=lambda msg: None, batch=8
    )
    await puller.start()
    try:
        await asyncio.sleep(0.2)  # idle, waiting to be woken
        for _ in range(20):
            # Woken (a message's work ended) in the same loop turn as the stop: a cancellation
            # lost there (Python 3.11's wait_for drops it) kept a runner alive for good.
            puller._wake.set()
            await asyncio.wait_for(puller.stop(), 3)
            await puller.start()
    finally:
        await puller.stop()
        await js.delete_consumer(bus.subjects.RESULTS_STREAM, "pull-stop-test")
