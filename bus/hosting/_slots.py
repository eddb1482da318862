"""A count of free slots with one waiter at a time: a cheaper `asyncio.Semaphore`.

Python 3.11's `Semaphore.acquire` calls `locked()`, which builds a generator over its
waiters on every call; on the hot path of every message that is measurable. Each use
here has a single task waiting at most (a subscription's callbacks run one at a time;
a runner publishes from one loop).
"""

from __future__ import annotations

import asyncio

__all__ = ["Slots"]


class Slots:
    def __init__(self, count: int) -> None:
        self.free = count
        self._waiter: asyncio.Future[None] | None = None

    async def acquire(self) -> None:
        """Take a slot, waiting for one to be released if none is free."""
        while self.free <= 0:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        self.free -= 1

    def release(self) -> None:
        self.free += 1
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
