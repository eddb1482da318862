"""Rollouts asked for one at a time, as NeMo Gym's `/run` asks: each a durable task.

A NeMo Gym client posts one row and waits for its rollout on the same connection. Here
that row becomes a task of one long-lived run (`RunClient`, which owns the protocol), so
the rollout runs on whichever agent worker pulls it, and a worker killed mid-rollout
costs a redelivery to another worker, not an error to the client. How each task ends,
and the words for it, are the run's `RunBook`'s, as for `collect` and the trainers; the
caller waits for the row its own task ends with. A second result of the same task (a
redelivered task that ran twice) finds it ended and is dropped.

How a request ends (`Outcome.status`, from the row's failure class):

- `ROLLOUT`: the agent's rollout row, rewarded.
- `FAILED`: the agent's failure row: the rollout ran and failed, a fact about this row,
  not about the bus.
- `UNAVAILABLE`: nobody can run it now (`no_worker`: no live worker serves the agent, and
  none is coming; `bus_unavailable`: the bus is away, or the front is stopping): asking
  again later may succeed.
- `LOST`: the workers died on the task every time it was delivered, or no result came by
  its deadline: whether it could ever run is unknown, so it is the infrastructure's.

Nobody waits long for an agent nobody serves: a request for one is answered at once, and
the requests already waiting for one are answered once it has gone unserved for
`Timeouts.unserved_grace`, or at once where the workers that served it were given up on.
Where the front's own process is replacing a worker of the agent (`LocalWorkers`), one
is coming: requests are taken and wait for it (up to `Timeouts.worker_start`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import msgspec

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    BusUnavailable,
    ClaimStoreFull,
    GymError,
    Limits,
    PayloadTooLarge,
    RolloutSummary,
    Timeouts,
)

from ..connection import Bus
from ..run import RunBook, RunClient, not_served, serve_hint, unserved_row

__all__ = ["Outcome", "OutcomeStatus", "RolloutRequests"]

log = logging.getLogger("gymbus.front")

SERVED_FOR = 0.5
"""Seconds a sign of life vouches for an agent: a worker's answer to a ping, or a result of
the agent's. Every `/run` asks whether its agent is served; thousands posted at once must
not become thousands of pings to a worker busy with their rollouts."""
WATCH_EVERY = 1.0
"""Seconds between two looks at the requests waiting: deadlines, and agents gone unserved."""

_summary = msgspec.json.Decoder(RolloutSummary)


class LocalWorkers(Protocol):
    """What the front's own process knows of the worker processes it started."""

    def given_up(self, agent: str) -> str | None:
        """Why its workers serving `agent` were given up on (none is coming), if they were."""

    def replacing(self, agent: str) -> bool:
        """Whether one of its workers serving `agent` is being replaced (one is coming)."""


class NoLocalWorkers:
    """A front that started no workers: every agent is served from elsewhere, or not."""

    def given_up(self, agent: str) -> str | None:
        return None

    def replacing(self, agent: str) -> bool:
        return False


class OutcomeStatus(enum.Enum):
    ROLLOUT = "rollout"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    LOST = "lost"


_STATUS_OF_CLASS = {
    "no_worker": OutcomeStatus.UNAVAILABLE,
    "bus_unavailable": OutcomeStatus.UNAVAILABLE,
    "claim_store_full": OutcomeStatus.UNAVAILABLE,
    "deliveries_exhausted": OutcomeStatus.LOST,
    "deadline_exceeded": OutcomeStatus.LOST,
}
"""The failure classes that are the infrastructure's; any other is the rollout's own."""


@dataclass(frozen=True)
class Outcome:
    """How one requested rollout ended: its row (a rollout or a failure row)."""

    status: OutcomeStatus
    body: bytes


def outcome_of(body: bytes, agent: str = "") -> Outcome:
    """A row as an `Outcome`: `ROLLOUT`, or what its failure class says (logged: the front
    writes no failures file, so its log says which rollouts failed and why)."""
    try:
        summary = _summary.decode(body)
    except msgspec.DecodeError:
        return Outcome(OutcomeStatus.FAILED, body)
    if isinstance(summary.failure_class, msgspec.UnsetType):
        return Outcome(OutcomeStatus.ROLLOUT, body)
    status = _STATUS_OF_CLASS.get(str(summary.failure_class), OutcomeStatus.FAILED)
    log.info("a rollout of %s ended %s: %s: %s", agent or "an agent", status.value,
             summary.failure_class, summary.failure_message)  # fmt: skip
    return Outcome(status, body)


class RolloutRequests:
    """One run whose tasks are requested one by one (`run`); see the module docstring.
    Make it with `open`, end it with `close`."""

    def __init__(self, bus: Bus, client: RunClient, timeouts: Timeouts, workers: LocalWorkers) -> None:
        self._bus = bus
        self._client = client
        self._timeouts = timeouts
        self._workers = workers
        self.book = RunBook(timeouts.result_grace)
        self._next_seq = 0
        self._served_until: dict[str, float] = {}
        self._unserved_since: dict[str, float] = {}
        self._pings: dict[str, asyncio.Future[bool]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def open(
        cls,
        bus: Bus,
        run_id: str | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        workers: LocalWorkers | None = None,
    ) -> RolloutRequests:
        """A fresh run (`run_id`, by default a new one) ready to take requests."""
        run_id = run_id or "front" + uuid.uuid4().hex[:16]
        client = await RunClient.open(bus, run_id, limits=limits, timeouts=timeouts)
        requests = cls(bus, client, timeouts, workers or NoLocalWorkers())
        await client.watch_given_up(requests.book.given_up)
        requests._tasks = [
            asyncio.create_task(requests._read_results(), name="the front's results"),
            asyncio.create_task(requests._watch(), name="the front's waiting requests"),
        ]
        return requests

    async def run(self, agent: str, row: bytes) -> Outcome:
        """The rollout of `row` by `agent`, run as a task on its queue; see `OutcomeStatus`."""
        if not await self._served(agent) and not self._workers.replacing(agent):
            return outcome_of(unserved_row(row, agent, self._hint(agent)), agent)
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        entry = self.book.submitted(seq, time.time() + self._timeouts.rollout, row, agent)
        ended = self.book.ended(seq)
        try:
            await self._client.submit(agent, row, seq, 0, entry.deadline)
        except (BusUnavailable, ClaimStoreFull, PayloadTooLarge) as exc:
            self.book.not_sent(seq, exc)
        try:
            return outcome_of(await ended, agent)
        finally:
            self.book.forget(seq)

    def _hint(self, agent: str) -> str:
        return self._workers.given_up(agent) or serve_hint(agent)

    async def _served(self, agent: str) -> bool:
        """Whether some worker serves `agent`: a sign of life within `SERVED_FOR`, else the
        answer to a ping, one at a time (every request arriving meanwhile shares it)."""
        if time.monotonic() < self._served_until.get(agent, 0.0):
            return True
        ping = self._pings.get(agent)
        if ping is None:
            ping = self._pings[agent] = asyncio.ensure_future(self._ping(agent))
        return await asyncio.shield(ping)

    async def _ping(self, agent: str) -> bool:
        try:
            served = bool(await self._bus.served([agent]))
        finally:
            del self._pings[agent]
        if served:
            self._served_until[agent] = time.monotonic() + SERVED_FOR
        return served

    async def _read_results(self) -> None:
        async for results in self._client.results():
            for result in results:
                entry = self.book.settle(result.seq, result.body)
                if entry is not None:
                    self._served_until[entry.agent] = time.monotonic() + SERVED_FOR
            await self._client.ack(results)  # answered (or no one asks any more): never again

    async def _watch(self) -> None:
        """End the requests past their deadline, and those of agents gone unserved."""
        while True:
            await asyncio.sleep(WATCH_EVERY)
            self.book.expired()
            waited_for = self.book.agents_waited_for()
            for agent in set(self._unserved_since) - waited_for:
                del self._unserved_since[agent]  # a later wait starts its own grace
            for agent in waited_for:
                try:
                    await self._end_if_unserved(agent)
                except GymError as exc:  # the bus is away: asked again next time
                    log.debug("could not tell whether %s is served: %s", agent, exc)

    async def _end_if_unserved(self, agent: str) -> None:
        if await self._served(agent) or self._workers.replacing(agent):
            self._unserved_since.pop(agent, None)
            return
        since = self._unserved_since.setdefault(agent, time.monotonic())
        why = self._workers.given_up(agent)
        if why is None and time.monotonic() - since < self._timeouts.unserved_grace:
            return
        ended = self.book.unserved(agent, why)
        log.warning("answered %d waiting request(s) of %s: %s",
                    len(ended), agent, not_served("it", why or "none came back"))  # fmt: skip
        await self._client.withdraw_tasks([seq for seq, _ in ended])

    @property
    def in_flight(self) -> int:
        """Requests waiting for their rollout."""
        return len(self.book.in_flight)

    async def close(self) -> None:
        """Stop: requests still waiting end `UNAVAILABLE`, the run's queued tasks are
        withdrawn and its results deleted."""
        self.book.abandon("the front is stopping")
        reading, watching = self._tasks or (None, None)
        if watching is not None:
            watching.cancel()
        await self._client.close(forget=True)  # its results end, and so does the reading
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
