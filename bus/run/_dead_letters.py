"""Tasks JetStream gave up on: delivered `max_deliver` times and never acknowledged.

An agent worker turns every task it can read into a result, so a task is given up only
when its workers died (or hung past `ack_wait`) on it every time. JetStream then stops
delivering it, leaves it in the work queue, and publishes a MAX_DELIVERIES advisory. The
runner that published the task listens for these: it writes the rollout as a failure
row, rather than waiting for a result that will never come, and deletes the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gymbus.schemas import RUN, SEQ, header_int

from ..cluster import Connection
from ..wire import subjects

__all__ = ["ExhaustedTasks"]

log = logging.getLogger("gymbus.tasks")


class _Advisory(msgspec.Struct):
    stream_seq: int
    deliveries: int = 0


_advisory = msgspec.json.Decoder(_Advisory)


class ExhaustedTasks:
    """Calls `given_up(seq, deliveries)` for each task of `run` that JetStream gave up on."""

    def __init__(self, conn: Connection, run_id: str, given_up: Callable[[int, int], object]) -> None:
        self.conn = conn
        self.js = conn.js
        self.run_id = run_id
        self.given_up = given_up
        self.subscription: Subscription | None = None

    async def start(self) -> None:
        self.subscription = await self.conn.client.subscribe(
            subjects.max_deliveries(subjects.TASKS_STREAM), cb=self._advised
        )

    async def stop(self) -> None:
        if self.subscription is not None:
            await self.subscription.unsubscribe()
            self.subscription = None

    async def _advised(self, msg: Msg) -> None:
        try:
            advisory = _advisory.decode(msg.data)
            task = await self.js.get_msg(subjects.TASKS_STREAM, advisory.stream_seq)
        except (msgspec.DecodeError, nats.js.errors.NotFoundError):
            return  # not an advisory we read, or a task already gone
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not read a task JetStream gave up on: %s", type(exc).__name__)
            return
        headers = task.headers or {}
        if headers.get(RUN) != self.run_id:
            return  # another run's: its runner deals with it
        self.given_up(header_int(headers, SEQ, -1), advisory.deliveries)
        try:
            await self.js.delete_msg(subjects.TASKS_STREAM, advisory.stream_seq)
        except (nats.errors.Error, TimeoutError):
            pass  # left in the queue; delivered no more, and the run has its failure row
