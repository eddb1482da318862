"""The run's bookkeeping: every task a run submits ends as exactly one row, and this
module is where those ends, and the words for each, are named.

A submitted task ends the first of these ways; any later end of the same task is dropped
(a redelivered task that ran twice, a result that comes after its deadline was written off):

- **a result**: the agent's row, a rollout or the agent's own failure row (`settle`);
- **given up** (`deliveries_exhausted`): JetStream stopped delivering it, its workers died
  or hung on it `max_deliver` times, so no result can come (`given_up`);
- **expired** (`deadline_exceeded`): no result by its deadline plus a grace; the agent
  drops work past the deadline, and the grace is for its own report to arrive (`expired`);
- **unserved** (`no_worker`): no live worker serves its agent any more, and none is
  coming, so no result can come (`unserved`);
- **not sent** (the error's own class): the bus refused the task (`not_sent`);
- **abandoned** (`bus_unavailable`): the caller stops waiting for every task (`abandon`).

A task whose agent no worker serves is never submitted: its row is `unserved_row`'s.

`RunBook` keeps only the tasks in flight, each with what its failure row is made from, so
what a runner keeps for settled tasks (collect's bits, a trainer's rows) stays its own. A
caller that waits for one task's row (the front's `/run`) gets it from `ended`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gymbus.schemas import GymError, failure_row

from ..wire import subjects

__all__ = [
    "EXPIRED",
    "RunBook",
    "Submitted",
    "given_up_message",
    "not_sent_message",
    "not_served",
    "unserved_row",
]

EXPIRED = "no result arrived before the rollout's deadline; the rollout was dropped"


def given_up_message(deliveries: int) -> str:
    """Why a task JetStream stopped delivering has no result."""
    return (
        f"the task was delivered {deliveries} times and never finished: its agent worker "
        "died or hung on it each time (see the workers' log)"
    )


def not_served(subject: str, hint: str) -> str:
    """The message of a row nobody could take: no worker serves `subject`; `hint` says what to do."""
    return f"no worker serves {subject}: {hint}"


def serve_hint(agent: str) -> str:
    """What to do when no worker serves `agent`, unless the caller knows better."""
    return f"start one with `gym-runner serve {agent}`"


def not_sent_message(exc: GymError) -> str:
    """Why a task the bus refused (too big, the bus away) has no result."""
    return f"the task could not be sent: {exc}"


def unserved_row(row: bytes, agent: str, hint: str | None = None, where: str = "", **fields: Any) -> bytes:
    """`row`'s failure row when no worker serves `agent`: it was never submitted. `where`,
    if given, names the row's place in its input (`file:line: field`)."""
    message = not_served(subjects.agent_run(agent), hint or serve_hint(agent))
    return failure_row(row, "no_worker", f"{where}: {message}" if where else message, **fields)


@dataclass(frozen=True)
class Submitted:
    """A task in flight: its deadline (epoch seconds), its agent, and what its failure row
    is made from: the row it was sent (or none) and the fields that name it."""

    deadline: float
    row: bytes = b""
    fields: Mapping[str, Any] = field(default_factory=dict)
    agent: str = ""

    def failure_row(self, failure_class: str, message: str) -> bytes:
        """This task's failure row."""
        return failure_row(self.row, failure_class, message, **self.fields)


class RunBook:
    """The tasks of one run that are in flight, and how each ends; see the module docstring.
    `grace` is how long past a task's deadline its result is still waited for (seconds)."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.in_flight: dict[int, Submitted] = {}
        self._waiting: dict[int, asyncio.Future[bytes]] = {}

    def submitted(
        self, seq: int, deadline: float, row: bytes = b"", agent: str = "", **fields: Any
    ) -> Submitted:
        """Count task `seq` (of `agent`) as in flight until `deadline`."""
        entry = Submitted(deadline, row, fields, agent)
        self.in_flight[seq] = entry
        return entry

    def ended(self, seq: int) -> asyncio.Future[bytes]:
        """The row task `seq` ends with (its result, or its failure row), for a caller that
        waits for it; call before submitting, and `forget` it when done waiting."""
        waiter = self._waiting[seq] = asyncio.get_running_loop().create_future()
        return waiter

    def forget(self, seq: int) -> None:
        """Nobody waits for task `seq` any more (it ended, or its caller went away)."""
        self._waiting.pop(seq, None)

    def _end(self, seq: int, row: bytes) -> bool:
        """End `seq` with `row` if it was in flight; whether it was."""
        if self.in_flight.pop(seq, None) is None:
            return False
        waiter = self._waiting.pop(seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(row)
        return True

    def settle(self, seq: int, body: bytes = b"") -> Submitted | None:
        """Task `seq`'s result (`body`) came: its entry, or `None` if it had already ended
        (or was never submitted)."""
        entry = self.in_flight.get(seq)
        return entry if entry is not None and self._end(seq, body) else None

    def given_up(self, seq: int, deliveries: int) -> bytes | None:
        """JetStream gave up on task `seq` after `deliveries`: its failure row, or `None`
        if it had already ended."""
        return self._end_as(seq, "deliveries_exhausted", given_up_message(deliveries))

    def not_sent(self, seq: int, exc: GymError) -> bytes | None:
        """The bus refused task `seq` (`exc`): its failure row, or `None` if it had ended."""
        return self._end_as(seq, exc.type, not_sent_message(exc))

    def _end_as(self, seq: int, failure_class: str, message: str) -> bytes | None:
        entry = self.in_flight.get(seq)
        if entry is None:
            return None
        row = entry.failure_row(failure_class, message)
        self._end(seq, row)
        return row

    def expired(self, now: float | None = None) -> list[tuple[int, bytes]]:
        """End the tasks whose deadline plus the grace is before `now` (default: the time):
        each one's seq and failure row."""
        cutoff = (time.time() if now is None else now) - self.grace
        late = [seq for seq, entry in self.in_flight.items() if entry.deadline < cutoff]
        return self._end_each(late, "deadline_exceeded", EXPIRED)

    def expire_all(self) -> list[tuple[int, bytes]]:
        """End every task still in flight as expired (a batch that stopped waiting)."""
        return self.expired(float("inf"))

    def unserved(self, agent: str, hint: str | None = None) -> list[tuple[int, bytes]]:
        """End every task of `agent` in flight: no live worker serves it, and none is coming
        (`hint` says why, or what to do)."""
        seqs = [seq for seq, entry in self.in_flight.items() if entry.agent == agent]
        message = not_served(subjects.agent_run(agent), hint or serve_hint(agent))
        return self._end_each(seqs, "no_worker", message)

    def abandon(self, message: str) -> list[tuple[int, bytes]]:
        """End every task in flight: the caller stops waiting for all of them (`message`)."""
        return self._end_each(list(self.in_flight), "bus_unavailable", message)

    def _end_each(self, seqs: list[int], failure_class: str, message: str) -> list[tuple[int, bytes]]:
        ended = []
        for seq in seqs:
            row = self._end_as(seq, failure_class, message)
            if row is not None:
                ended.append((seq, row))
        return ended

    def agents_waited_for(self) -> set[str]:
        """The agents of the tasks in flight."""
        return {entry.agent for entry in self.in_flight.values()}
