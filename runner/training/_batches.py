"""A trainer's batch of rollouts, through the durable task queue, as `collect` sends them.

Each batch is a run of its own (`bus.RunClient`): its task rows go to the agents' work
queues, signed with a key per trainer process, and its results come back through a
consumer made for the batch. A worker killed mid-rollout never acks its task, so the
queue gives it to another worker after the agent's `ack_wait`: the batch waits for the
redelivered rollout instead of losing it. A row whose agent no worker serves (after
waiting `Timeouts.worker_start` for one), whose task JetStream gave up on, or whose
result has not come by its deadline (plus a grace), becomes a failure row; a batch
always returns one row per task.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from gymbus.bus import Connection, RunClient, is_served, model_servers, subjects
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, Limits, Timeouts, failure_row

__all__ = ["BatchTask", "TaskBatches"]

log = logging.getLogger("gymbus.trainer")


@dataclass(frozen=True)
class BatchTask:
    """One rollout to run: the agent and the task row it gets."""

    agent: str
    body: bytes


class TaskBatches:
    """Runs batches of rollouts over one connection; `run` returns a row per task, in order.

    `rollout_timeout` is each rollout's deadline from its publish (the agent drops work
    past it); `grace` is how long past it the batch waits for the agent's own report.
    """

    def __init__(
        self,
        nc: Connection,
        *,
        rollout_timeout: float = DEFAULT_TIMEOUTS.rollout,
        grace: float = DEFAULT_TIMEOUTS.result_grace,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.nc = nc
        self.rollout_timeout = rollout_timeout
        self.grace = grace
        self.limits = limits
        self.timeouts = timeouts
        # A fresh prefix per trainer process: a restarted trainer never reads an old run's results.
        self.prefix = "trl-" + uuid.uuid4().hex[:12]
        self.batches = 0
        self.key: bytes | None = None
        """The secret every batch's tasks are signed with, made with the first batch."""
        self.forged = 0
        """Results dropped because their signature did not match their task's."""

    async def model_servers(self, agents: set[str]) -> dict[str, set[str]]:
        """The inference servers of the models `agents` call, as their live services list them."""
        return await model_servers(self.nc, agents, self.timeouts.discovery)

    async def run(self, tasks: Sequence[BatchTask]) -> list[bytes]:
        """Every task's rollout row (or failure row), in the order of `tasks`."""
        run_id = f"{self.prefix}-{self.batches}"
        self.batches += 1
        client = await RunClient.open(self.nc, run_id, key=self.key, limits=self.limits, timeouts=self.timeouts)
        self.key = client.key
        batch = _Batch(self, client, tasks)
        try:
            return await batch.gather()
        finally:
            await batch.stop()
            self.forged += client.forged


class _Batch:
    """One batch's run: its submissions, and the rows as they come."""

    def __init__(self, owner: TaskBatches, client: RunClient, tasks: Sequence[BatchTask]) -> None:
        self.owner = owner
        self.client = client
        self.tasks = tasks
        self.rows: list[bytes | None] = [None] * len(tasks)
        self.missing = len(tasks)
        self.complete = asyncio.Event()
        self.reading = asyncio.create_task(self._read())

    async def gather(self) -> list[bytes]:
        owner = self.owner
        deadline = time.time() + owner.rollout_timeout
        await self.client.watch_given_up(self._given_up)
        served = await _wait_served(owner.nc, {task.agent for task in self.tasks}, owner.timeouts.worker_start)
        for seq, task in enumerate(self.tasks):
            if served[task.agent]:
                await self.client.submit(task.agent, task.body, seq, 0, deadline)
            else:
                message = (
                    f"no worker serves {subjects.agent_run(task.agent)}: start one with `gym-runner serve`"
                )
                self._fill(seq, failure_row(task.body, "no_worker", message))
        await self.client.wait_submitted()
        try:
            async with asyncio.timeout(max(0.0, deadline + owner.grace - time.time())):
                await self.complete.wait()
        except TimeoutError:
            pass
        message = "no result arrived before the rollout's deadline; the rollout was dropped"
        return [
            row if row is not None else failure_row(task.body, "deadline_exceeded", message)
            for row, task in zip(self.rows, self.tasks, strict=True)
        ]

    async def _read(self) -> None:
        async for results in self.client.results():
            for result in results:
                self._fill(result.seq, result.body)
            await self.client.ack(results)

    def _given_up(self, seq: int, deliveries: int) -> None:
        if 0 <= seq < len(self.tasks):
            message = f"the task was delivered {deliveries} times and never finished: its agent worker died on it"
            self._fill(seq, failure_row(self.tasks[seq].body, "deliveries_exhausted", message))

    def _fill(self, seq: int, row: bytes) -> None:
        if 0 <= seq < len(self.rows) and self.rows[seq] is None:
            self.rows[seq] = row
            self.missing -= 1
            if self.missing == 0:
                self.complete.set()

    async def stop(self) -> None:
        """Stop reading, and delete the batch's consumer and results."""
        await self.client.stop_results()
        await self.reading
        await self.client.close(forget=True)


async def _wait_served(nc: Connection, agents: set[str], timeout: float) -> dict[str, bool]:
    """Which agents some worker serves. One that none does yet is waited for, up to
    `timeout` in all: workers started beside a trainer may still be starting."""
    deadline = time.monotonic() + timeout
    served = {}
    for agent in sorted(agents):
        live = await is_served(nc, agent)
        if not live:
            log.warning("no worker serves agent %s yet; waiting for one", agent)
        while not live and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            live = await is_served(nc, agent)
        served[agent] = live
    return served
