"""Which rollouts of a run are settled, which are in flight, and when those expire.

Settled means written (to the rollouts or the failures file) or skipped because an
earlier run settled it. One bit per rollout, so a million rollouts cost 125 KB; only
the in-flight ones (at most `--concurrency`) have an entry with their deadline, kept by
the run's `bus.RunBook`, which also names how a task ends without a result.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gymbus.bus import RunBook, Slots, Submitted
from gymbus.schemas import AGENT_REF, DEFAULT_TIMEOUTS, ROLLOUT_INDEX, TASK_INDEX

__all__ = ["Ledger"]


class Ledger:
    def __init__(self, total: int, concurrency: int, grace: float = DEFAULT_TIMEOUTS.result_grace) -> None:
        self.total = total
        self.settled = 0
        self._bits = bytearray((total + 7) // 8)
        self.book = RunBook(grace)
        self.window = Slots(concurrency)
        self._held = 0
        self.all_settled = asyncio.Event()
        if total == 0:
            self.all_settled.set()

    @property
    def in_flight(self) -> dict[int, Submitted]:
        return self.book.in_flight

    def is_settled(self, seq: int) -> bool:
        return 0 <= seq < self.total and bool(self._bits[seq >> 3] & (1 << (seq & 7)))

    async def launch(
        self, seq: int, task_index: int, rollout_index: int, agent: str, timeout: float
    ) -> Submitted | None:
        """Wait for a free slot in the window, then count `seq` as in flight, its deadline
        `timeout` seconds from now. `None` if `seq` was settled meanwhile (a result an
        interrupted run left on the bus): then nothing is to be published."""
        await self.window.acquire()
        if self.is_settled(seq):
            self.window.release()
            return None
        keys: dict[str, Any] = {
            TASK_INDEX: task_index,
            ROLLOUT_INDEX: rollout_index,
            AGENT_REF: {"type": "responses_api_agents", "name": agent},
        }
        return self.book.submitted(seq, time.time() + timeout, **keys)

    def settle(self, seq: int) -> bool:
        """Mark `seq` settled; `False` if it already was (a duplicate) or is not of this run.
        The window's slot it held stays taken until `free_settled`: its result leaves the
        bus only once its row is written, so the results the bus holds for the run stay
        within the window."""
        if not 0 <= seq < self.total or self.is_settled(seq):
            return False
        if self.book.settle(seq) is not None:
            self._held += 1
        self._bits[seq >> 3] |= 1 << (seq & 7)
        self.settled += 1
        if self.settled == self.total:
            self.all_settled.set()
        return True

    def free_settled(self) -> None:
        """Give back the slots of the rollouts settled so far: their rows are safe."""
        for _ in range(self._held):
            self.window.release()
        self._held = 0

    def given_up(self, seq: int, deliveries: int) -> bytes | None:
        """The failure row of in-flight `seq`, which JetStream gave up on (`None` if not in flight)."""
        return self._freed(self.book.given_up(seq, deliveries))

    def expired(self) -> list[tuple[int, bytes]]:
        """The failure rows of the in-flight rollouts past their deadline and grace (a scan
        of at most `--concurrency` entries, so nothing is kept per settled rollout)."""
        ended = self.book.expired()
        for _ in ended:
            self.window.release()
        return ended

    def _freed(self, row: bytes | None) -> bytes | None:
        if row is not None:
            self.window.release()
        return row
