"""Rollouts asked for one at a time, as NeMo Gym's `/run` asks: each a durable task.

A NeMo Gym client posts one row and waits for its rollout on the same connection. Here
that row becomes a task of one long-lived run (`RunClient`, which owns the protocol), so
the rollout runs on whichever agent worker pulls it, and a worker killed mid-rollout
costs a redelivery to another worker, not an error to the client. The caller waits for
the result of its own task only; a second result of the same task (a redelivered task
that ran twice) finds no one waiting and is dropped.

How a request ends, and why (`Outcome.status`):

- `ROLLOUT`: the agent's rollout row, rewarded.
- `FAILED`: the agent's failure row (`_ng_failure_class`): the rollout ran and failed,
  a fact about this row, not about the bus.
- `UNAVAILABLE`: nobody can run it now (no worker serves the agent, the bus is away):
  asking again later may succeed.
- `LOST`: the workers died on the task every time it was delivered, or no result came by
  its deadline: whether it could ever run is unknown, so it is the infrastructure's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from dataclasses import dataclass

import msgspec

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    BusUnavailable,
    ClaimStoreFull,
    Limits,
    PayloadTooLarge,
    RolloutSummary,
    Timeouts,
)

from ..connection import Bus
from ..run import EXPIRED, RunClient, given_up_message

__all__ = ["Outcome", "OutcomeStatus", "RolloutRequests"]

log = logging.getLogger("gymbus.front")

SERVED_FOR = 0.5
"""Seconds a sign of life vouches for an agent: a worker's answer to a ping, or a result of
the agent's. Every `/run` asks whether its agent is served; thousands posted at once must
not become thousands of pings to a worker busy with their rollouts."""

_summary = msgspec.json.Decoder(RolloutSummary)


class OutcomeStatus(enum.Enum):
    ROLLOUT = "rollout"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    LOST = "lost"


@dataclass(frozen=True)
class Outcome:
    """How one requested rollout ended: its row (a rollout or a failure row), or why
    there is none (`message`)."""

    status: OutcomeStatus
    body: bytes = b""
    message: str = ""


def outcome_of(body: bytes) -> Outcome:
    """A result row as an `Outcome`: `FAILED` when it is a failure row."""
    try:
        failed = not isinstance(_summary.decode(body).failure_class, msgspec.UnsetType)
    except msgspec.DecodeError:
        failed = True
    return Outcome(OutcomeStatus.FAILED if failed else OutcomeStatus.ROLLOUT, body)


class RolloutRequests:
    """One run whose tasks are requested one by one (`run`); see the module docstring.
    Make it with `open`, end it with `close`."""

    def __init__(self, bus: Bus, client: RunClient, timeouts: Timeouts) -> None:
        self._bus = bus
        self._client = client
        self._timeouts = timeouts
        self._waiting: dict[int, asyncio.Future[Outcome]] = {}
        self._agents: dict[int, str] = {}
        self._next_seq = 0
        self._served_until: dict[str, float] = {}
        self._pings: dict[str, asyncio.Future[bool]] = {}
        self._reading: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        bus: Bus,
        run_id: str | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> RolloutRequests:
        """A fresh run (`run_id`, by default a new one) ready to take requests."""
        run_id = run_id or "front" + uuid.uuid4().hex[:16]
        client = await RunClient.open(bus, run_id, limits=limits, timeouts=timeouts)
        requests = cls(bus, client, timeouts)
        await client.watch_given_up(requests._given_up)
        requests._reading = asyncio.create_task(requests._read_results(), name="the front's results")
        return requests

    async def run(self, agent: str, row: bytes) -> Outcome:
        """The rollout of `row` by `agent`, run as a task on its queue; see `OutcomeStatus`."""
        if not await self._served(agent):
            return Outcome(OutcomeStatus.UNAVAILABLE, message=f"no worker serves the agent {agent}")
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        waiting = self._waiting[seq] = asyncio.get_running_loop().create_future()
        self._agents[seq] = agent
        deadline = time.time() + self._timeouts.rollout
        try:
            await self._client.submit(agent, row, seq, 0, deadline)
            async with asyncio.timeout(self._timeouts.rollout + self._timeouts.result_grace):
                return await waiting
        except TimeoutError:
            return Outcome(OutcomeStatus.LOST, message=EXPIRED)
        except (BusUnavailable, ClaimStoreFull) as exc:
            return Outcome(OutcomeStatus.UNAVAILABLE, message=f"the task could not be sent: {exc}")
        except PayloadTooLarge as exc:
            return Outcome(OutcomeStatus.FAILED, message=f"the task could not be sent: {exc}")
        finally:
            self._waiting.pop(seq, None)
            self._agents.pop(seq, None)

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

    def _given_up(self, seq: int, deliveries: int) -> None:
        self._resolve(seq, Outcome(OutcomeStatus.LOST, message=given_up_message(deliveries)))

    def _resolve(self, seq: int, outcome: Outcome) -> None:
        waiting = self._waiting.get(seq)
        if waiting is not None and not waiting.done():
            waiting.set_result(outcome)

    async def _read_results(self) -> None:
        async for results in self._client.results():
            for result in results:
                agent = self._agents.get(result.seq)
                if agent is not None:
                    self._served_until[agent] = time.monotonic() + SERVED_FOR
                self._resolve(result.seq, outcome_of(result.body))
            await self._client.ack(results)  # answered (or no one asks any more): never again

    @property
    def in_flight(self) -> int:
        """Requests waiting for their rollout."""
        return len(self._waiting)

    async def close(self) -> None:
        """Stop: requests still waiting end `UNAVAILABLE`, the run's queued tasks are
        withdrawn and its results deleted."""
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_result(Outcome(OutcomeStatus.UNAVAILABLE, message="the front is stopping"))
        await self._client.close(forget=True)
        if self._reading is not None:
            await asyncio.gather(self._reading, return_exceptions=True)
