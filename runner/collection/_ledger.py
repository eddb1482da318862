"""Which rollouts of a run are settled, which are in flight, and when those expire.

Settled means written (to the rollouts or the failures file) or skipped because an
earlier run settled it. One bit per rollout, so a million rollouts cost 125 KB; only
the in-flight ones (at most `--concurrency`) have an entry with their deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from gymbus.bus import Slots
from gymbus.schemas import AGENT_REF, ROLLOUT_INDEX, TASK_INDEX, failure_row

__all__ = ["InFlight", "Ledger"]


@dataclass(frozen=True)
class InFlight:
    """A published rollout: enough to write a failure row if its result never comes."""

    task_index: int
    rollout_index: int
    agent: str
    deadline: float

    def keys(self) -> dict[str, Any]:
        """The fields that name this rollout in a row."""
        return {
            TASK_INDEX: self.task_index,
            ROLLOUT_INDEX: self.rollout_index,
            AGENT_REF: {"type": "responses_api_agents", "name": self.agent},
        }

    def failure_row(self, failure_class: str, message: str) -> bytes:
        """A failure row for this rollout, made by the runner (its task's row is not at hand)."""
        return failure_row(b"", failure_class, message, **self.keys())


class Ledger:
    def __init__(self, total: int, concurrency: int) -> None:
        self.total = total
        self.settled = 0
        self._bits = bytearray((total + 7) // 8)
        self.in_flight: dict[int, InFlight] = {}
        self.window = Slots(concurrency)
        self.all_settled = asyncio.Event()
        if total == 0:
            self.all_settled.set()

    def is_settled(self, seq: int) -> bool:
        return 0 <= seq < self.total and bool(self._bits[seq >> 3] & (1 << (seq & 7)))

    async def launch(
        self, seq: int, task_index: int, rollout_index: int, agent: str, timeout: float
    ) -> InFlight | None:
        """Wait for a free slot in the window, then count `seq` as in flight, its deadline
        `timeout` seconds from now. `None` if `seq` was settled meanwhile (a result an
        interrupted run left on the bus): then nothing is to be published."""
        await self.window.acquire()
        if self.is_settled(seq):
            self.window.release()
            return None
        entry = InFlight(task_index, rollout_index, agent, time.time() + timeout)
        self.in_flight[seq] = entry
        return entry

    def settle(self, seq: int) -> InFlight | None | bool:
        """Mark `seq` settled. Returns `False` if it already was (a duplicate), else its
        in-flight entry (or `None` for one that was never launched)."""
        if not 0 <= seq < self.total:
            return False
        entry = self.in_flight.pop(seq, None)
        if entry is not None:
            self.window.release()
        if self.is_settled(seq):
            return False
        self._bits[seq >> 3] |= 1 << (seq & 7)
        self.settled += 1
        if self.settled == self.total:
            self.all_settled.set()
        return entry

    def expired(self, now: float) -> list[tuple[int, InFlight]]:
        """In-flight rollouts whose deadline is before `now` (a scan of at most
        `--concurrency` entries, so nothing is kept per settled rollout)."""
        return [(seq, entry) for seq, entry in self.in_flight.items() if entry.deadline < now]
