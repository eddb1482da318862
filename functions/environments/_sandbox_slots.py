"""Fair turns at a worker's sandbox slots: slow submissions cannot starve quick ones.

A worker runs at most `concurrency` tests at once. Submissions queue for those slots,
and a free slot goes to the waiting submission that has held slots for the least time so
far (least attained service; among equals, the earliest to ask). A submission keeps its
slot from test to test, but once it has held it for `quantum` seconds it hands it over,
at the end of a test, to a waiting submission that has had less. So a new submission
waits at most for the tests running when it arrives and for new submissions ahead of it,
never for all the tests of the slow ones, and a queue of quick submissions still runs
each to the end in one turn (a lone test is never interrupted).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["Account", "Slots", "Turn", "slots_for"]


@dataclass
class Account:
    """One submission's time at the slots so far."""

    served: float = 0.0
    """Seconds it has held a slot."""
    turns: int = 0
    """Turns it has had."""


@dataclass(order=True)
class _Waiter:
    served: float
    order: int
    future: asyncio.Future[None] = field(compare=False)


class Turn:
    """A slot held by one submission; `should_yield` says when to hand it over."""

    def __init__(self, slots: Slots, account: Account) -> None:
        self.slots = slots
        self.account = account
        self.started = asyncio.get_running_loop().time()

    def held(self) -> float:
        return asyncio.get_running_loop().time() - self.started

    def should_yield(self) -> bool:
        """Whether this turn has lasted a quantum and someone who had less is waiting."""
        held = self.held()
        return held >= self.slots.quantum and self.slots.less_served_waiting(self.account.served + held)


class Slots:
    """`size` slots shared fairly (see the module docstring)."""

    def __init__(self, size: int, quantum: float) -> None:
        self.size = size
        self.quantum = quantum
        self.free = size
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()

    def _prune(self) -> None:
        while self._waiting and self._waiting[0].future.done():
            heapq.heappop(self._waiting)

    def less_served_waiting(self, served: float) -> bool:
        self._prune()
        return bool(self._waiting) and self._waiting[0].served < served

    async def _acquire(self, account: Account) -> None:
        self._prune()
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        waiter = _Waiter(account.served, next(self._order), asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release()  # handed a slot just as it gave up: pass it on
            raise

    def _release(self) -> None:
        self._prune()
        if self._waiting:
            heapq.heappop(self._waiting).future.set_result(None)
        else:
            self.free += 1

    @asynccontextmanager
    async def turn(self, account: Account) -> AsyncIterator[Turn]:
        """Hold a slot for `account` (waiting for one, fairly) until the block ends."""
        await self._acquire(account)
        turn = Turn(self, account)
        try:
            yield turn
        finally:
            account.served += turn.held()
            account.turns += 1
            self._release()


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[int, float], Slots]] = (
    weakref.WeakKeyDictionary()
)


def slots_for(size: int, quantum: float) -> Slots:
    """This worker's slots of that size (one set per event loop)."""
    slots = _per_loop.setdefault(asyncio.get_running_loop(), {})
    return slots.setdefault((size, quantum), Slots(size, quantum))
