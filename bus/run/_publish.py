"""Publishing rollout tasks to the durable queue: pipelined, acknowledged, republished.

A task is one JSON task row on `gym.tasks.<agent>`, with the headers `task_headers`
makes; its message id `<run>.<seq>.<attempt>` makes a repeat publish harmless.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import nats.errors

from gymbus.schemas import (
    ATTEMPT,
    DEADLINE,
    MSG_ID,
    RUN,
    SEQ,
    TOKEN,
    BusUnavailable,
    Timeouts,
    seconds_left,
    task_id,
)

from ..cluster import Connection
from ..wire import check_in_when_room, needs_claim

__all__ = ["TaskPublisher", "task_headers"]


def task_headers(
    run_id: str, seq: int, attempt: int, deadline: float, token: str | None = None
) -> dict[str, str]:
    """The headers of task `seq` of run `run_id`: where its result goes, which attempt it is,
    when its work is dropped, and the runner's `token` (`bus.run._runkeys.task_token`), which
    the agent echoes on the result so the runner knows it answers this task."""
    headers = {
        MSG_ID: task_id(run_id, seq, attempt),
        RUN: run_id,
        SEQ: str(seq),
        DEADLINE: f"{deadline:.3f}",
        ATTEMPT: str(attempt),
    }
    if token:
        headers[TOKEN] = token
    return headers


class TaskPublisher:
    """Pipelined JetStream publishes, at most `window` awaiting their acknowledgement.

    Acknowledgements are checked as they come, oldest first, each within
    `timeouts.connect` of its publish; one that fails or never comes (the server went
    away with the message) is published again, which the message id makes harmless,
    with backoff while the bus comes back, up to `timeouts.connect * 12`. A body too
    big for one message goes by claim check, kept until the task's deadline (waiting
    while the claim store is full).
    """

    def __init__(
        self,
        conn: Connection,
        window: int,
        timeouts: Timeouts,
        on_stored: Callable[[dict[str, str], int], None] | None = None,
    ) -> None:
        self.conn = conn
        self.js = conn.js
        self.window = window
        self.timeouts = timeouts
        self.on_stored = on_stored
        """Told each task's headers and its stream sequence once the server stored it."""
        self.pending: deque[tuple[float, asyncio.Future[Any], str, bytes, dict[str, str]]] = deque()

    async def publish(self, subject: str, body: bytes, headers: dict[str, str]) -> None:
        if needs_claim(self.conn, body):
            ttl = (seconds_left(headers) or self.timeouts.rollout) + self.timeouts.late_reply
            body, headers = await check_in_when_room(self.conn, subject, body, headers, ttl=ttl)
        try:
            future = await self.js.publish_async(subject, body, headers=headers)
        except (nats.errors.Error, OSError):  # OSError: the socket died before nats-py noticed
            await self._retry(subject, body, headers)
            return
        self.pending.append((time.monotonic(), future, subject, body, headers))
        while self.pending and (len(self.pending) >= self.window or self.pending[0][1].done()):
            await self._confirm_oldest()

    async def wait_all(self) -> None:
        while self.pending:
            await self._confirm_oldest()

    async def check_acks(self) -> None:
        """Check the acknowledgements that are in or overdue, even while publishing waits
        for a free slot (the slots may be held by tasks the server never stored)."""
        while self.pending and (
            self.pending[0][1].done() or time.monotonic() > self.pending[0][0] + self.timeouts.connect
        ):
            await self._confirm_oldest()

    async def _confirm_oldest(self) -> None:
        published, future, subject, body, headers = self.pending.popleft()
        left = published + self.timeouts.connect - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, left)):  # not wait_for, which can drop a cancellation
                ack = await future
        except (nats.errors.Error, TimeoutError):
            await self._retry(subject, body, headers)
            return
        self._stored(headers, ack)

    def _stored(self, headers: dict[str, str], ack: Any) -> None:
        if self.on_stored is not None:  # a duplicate's seq is the stored one's
            self.on_stored(headers, ack.seq)

    async def _retry(self, subject: str, body: bytes, headers: dict[str, str]) -> None:
        give_up = time.monotonic() + self.timeouts.connect * 12
        delay = 0.1
        while True:
            try:
                ack = await self.js.publish(subject, body, headers=headers, timeout=self.timeouts.connect)
                self._stored(headers, ack)
                return
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                if time.monotonic() > give_up:
                    raise BusUnavailable(
                        f"cannot publish tasks: {type(exc).__name__}", subject=subject
                    ) from None
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
