"""The run's bookkeeping: every task a run submits ends as exactly one row, and this
module is where those ends are named.

A submitted task ends the first of these ways; any later end of the same task is dropped
(a redelivered task that ran twice, a result that comes after its deadline was written off):

- **a result**: the agent's row, a rollout or the agent's own failure row (`settle`);
- **given up** (`deliveries_exhausted`): JetStream stopped delivering it, its workers died
  or hung on it `max_deliver` times, so no result can come (`given_up`);
- **expired** (`deadline_exceeded`): no result by its deadline plus a grace; the agent
  drops work past the deadline, and the grace is for its own report to arrive (`expired`);

A task whose agent no worker serves is never submitted: its row is `unserved_row`'s.

`RunBook` keeps only the tasks in flight, each with what its failure row is made from, so
what a runner keeps for settled tasks (collect's bits, a trainer's rows) stays its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gymbus.schemas import failure_row

from ..wire import subjects

__all__ = ["EXPIRED", "RunBook", "Submitted", "given_up_message", "not_served", "unserved_row"]

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


def unserved_row(row: bytes, agent: str, hint: str | None = None, where: str = "", **fields: Any) -> bytes:
    """`row`'s failure row when no worker serves `agent`: it was never submitted. `where`,
    if given, names the row's place in its input (`file:line: field`)."""
    hint = hint or f"start one with `gym-runner serve {agent}`"
    message = not_served(subjects.agent_run(agent), hint)
    return failure_row(row, "no_worker", f"{where}: {message}" if where else message, **fields)


@dataclass(frozen=True)
class Submitted:
    """A task in flight: its deadline (epoch seconds), and what its failure row is made
    from: the row it was sent (or none) and the fields that name it."""

    deadline: float
    row: bytes = b""
    fields: Mapping[str, Any] = field(default_factory=dict)

    def failure_row(self, failure_class: str, message: str) -> bytes:
        """This task's failure row."""
        return failure_row(self.row, failure_class, message, **self.fields)


class RunBook:
    """The tasks of one run that are in flight, and how each ends; see the module docstring.
    `grace` is how long past a task's deadline its result is still waited for (seconds)."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.in_flight: dict[int, Submitted] = {}

    def submitted(self, seq: int, deadline: float, row: bytes = b"", **fields: Any) -> Submitted:
        """Count task `seq` as in flight until `deadline`."""
        entry = Submitted(deadline, row, fields)
        self.in_flight[seq] = entry
        return entry

    def settle(self, seq: int) -> Submitted | None:
        """Task `seq`'s result came: its entry, or `None` if it had already ended (or was
        never submitted)."""
        return self.in_flight.pop(seq, None)

    def given_up(self, seq: int, deliveries: int) -> bytes | None:
        """JetStream gave up on task `seq` after `deliveries`: its failure row, or `None`
        if it had already ended."""
        entry = self.in_flight.pop(seq, None)
        return (
            None if entry is None else entry.failure_row("deliveries_exhausted", given_up_message(deliveries))
        )

    def expired(self, now: float | None = None) -> list[tuple[int, bytes]]:
        """End the tasks whose deadline plus the grace is before `now` (default: the time):
        each one's seq and failure row."""
        cutoff = (time.time() if now is None else now) - self.grace
        late = [seq for seq, entry in self.in_flight.items() if entry.deadline < cutoff]
        return [(seq, self.in_flight.pop(seq).failure_row("deadline_exceeded", EXPIRED)) for seq in late]

    def expire_all(self) -> list[tuple[int, bytes]]:
        """End every task still in flight as expired (a batch that stopped waiting)."""
        return self.expired(float("inf"))
