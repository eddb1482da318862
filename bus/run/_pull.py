"""A continuous pull from a durable JetStream consumer: messages reach the handler as
they arrive, and only while the caller has free capacity.

nats-py's `fetch(n)` waits for the whole batch or its timeout, which adds its timeout
to every lightly loaded task. Here standing pull requests (`$JS.API.CONSUMER.MSG.NEXT`)
ask for exactly the free capacity. Each has its own reply subject, so a status message
(408 expired, 404/409 ended) says which request ended; delivered messages carry their
stream subject instead, and are counted against the oldest open request (the server
serves one consumer's pull requests in order). After a reconnect every open request is
forgotten at once (a restarted server has lost them); one whose status never comes for
another reason is forgotten after its expiry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gymbus.schemas import DEFAULT_TIMEOUTS, Timeouts

from ..cluster import Connection
from ..wire import subjects

__all__ = ["Puller"]

log = logging.getLogger("gymbus.pull")

_STATUS = "Status"
_HEARTBEAT = "100"


@dataclass
class _PullRequest:
    remaining: int
    forget_at: float


class Puller:
    """Pull from `stream`/`consumer`, handing each message to `on_message` (which must
    not block: spawn the work). Call `done()` once per message when its work is over."""

    def __init__(
        self,
        conn: Connection,
        stream: str,
        consumer: str,
        capacity: int,
        on_message: Callable[[Msg], None],
        batch: int,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.conn = conn
        self.expires = timeouts.pull_expires
        self.grace = timeouts.pull_grace
        self.capacity = capacity
        self.on_message = on_message
        # Ask again once this many slots are free: often enough that a small capacity is
        # not left idle, seldom enough that a large one does not flood the server with pulls.
        self.batch = max(1, min(batch, capacity // 16))
        self._api = subjects.consumer_next(stream, consumer)
        self._inbox = ""
        self._sub: Subscription | None = None
        self._requests: dict[str, _PullRequest] = {}
        self._next_id = 0
        self._outstanding = 0
        self.in_flight = 0
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._reconnects = conn.client.stats["reconnects"]

    async def start(self) -> None:
        self._inbox = self.conn.client.new_inbox()
        self._sub = await self.conn.client.subscribe(f"{self._inbox}.*", cb=self._receive)
        self._loop_task = asyncio.create_task(self._keep_pulling())

    async def stop(self) -> None:
        """Stop asking for messages. Messages already handed over keep running."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    def done(self) -> None:
        """One handed-over message's work is finished: its capacity is free again."""
        self.in_flight -= 1
        if self._free() >= self.batch:
            self._wake.set()

    def _free(self) -> int:
        return self.capacity - self.in_flight - self._outstanding

    async def _keep_pulling(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._forget_expired(loop.time())
            free = self._free()
            if free > 0 and (free >= self.batch or self._outstanding == 0):
                await self._pull(free, loop.time())
            self._wake.clear()
            # Not `wait_for`: on Python 3.11 it drops a cancellation that comes in the same
            # loop turn as the wake-up, and `stop()` then waits for this loop forever.
            try:
                async with asyncio.timeout(1.0):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _pull(self, count: int, now: float) -> None:
        self._next_id += 1
        request_id = str(self._next_id)
        self._requests[request_id] = _PullRequest(remaining=count, forget_at=now + self.expires + self.grace)
        self._outstanding += count
        body = json.dumps({"batch": count, "expires": int(self.expires * 1e9)}).encode()
        try:
            await self.conn.client.publish(self._api, body, reply=f"{self._inbox}.{request_id}")
        except (nats.errors.Error, OSError) as exc:  # disconnected: forget it, retry next round
            log.debug("pull request failed: %s", type(exc).__name__)
            self._end(request_id)

    def _forget_expired(self, now: float) -> None:
        reconnected = self.conn.client.stats["reconnects"] != self._reconnects
        self._reconnects = self.conn.client.stats["reconnects"]
        for request_id in [rid for rid, req in self._requests.items() if reconnected or req.forget_at < now]:
            self._end(request_id)

    def _end(self, request_id: str) -> None:
        request = self._requests.pop(request_id, None)
        if request is not None:
            self._outstanding -= request.remaining
            self._wake.set()

    async def _receive(self, msg: Msg) -> None:
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is not None:
            if status != _HEARTBEAT:
                self._end(msg.subject.rsplit(".", 1)[1])
            return
        oldest = next(iter(self._requests), None)
        if oldest is not None:
            request = self._requests[oldest]
            request.remaining -= 1
            self._outstanding -= 1
            if request.remaining <= 0:
                del self._requests[oldest]
        self.in_flight += 1
        self.on_message(msg)
