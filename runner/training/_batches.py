"""A trainer's batch of rollouts, through the durable task queue, as `collect` sends them.

Each batch is a run of its own (`bus.RunClient`): its task rows go to the agents' work
queues, signed with a key per trainer process, and its results come back through a
consumer made for the batch. A worker killed mid-rollout never acks its task, so the
queue gives it to another worker after the agent's `ack_wait`: the batch waits for the
redelivered rollout instead of losing it. A row whose agent no worker serves (after
waiting `Timeouts.worker_start` for one) becomes a failure row, and so does one whose
task ends without a result (`bus.RunBook`); a batch always returns one row per task.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from gymbus.bus import Bus, RunBook, RunClient, unserved_row
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, Limits, Timeouts

__all__ = ["BatchTask", "TaskBatches"]


@dataclass(frozen=True)
class BatchTask:
    """One rollout to run: the agent and the task row it gets."""

    agent: str
    body: bytes


class TaskBatches:
    """Runs batches of rollouts over one bus connection; `run` returns a row per task, in order.

    `rollout_timeout` is each rollout's deadline from its publish (the agent drops work
    past it); `grace` is how long past it the batch waits for the agent's own report.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        rollout_timeout: float = DEFAULT_TIMEOUTS.rollout,
        grace: float = DEFAULT_TIMEOUTS.result_grace,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.bus = bus
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
        return await self.bus.model_servers(agents, self.timeouts.discovery)

    async def run(self, tasks: Sequence[BatchTask]) -> list[bytes]:
        """Every task's rollout row (or failure row), in the order of `tasks`."""
        run_id = f"{self.prefix}-{self.batches}"
        self.batches += 1
        client = await RunClient.open(
            self.bus, run_id, key=self.key, limits=self.limits, timeouts=self.timeouts
        )
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
        self.book = RunBook(owner.grace)
        self.rows: list[bytes | None] = [None] * len(tasks)
        self.missing = len(tasks)
        self.complete = asyncio.Event()
        self.reading = asyncio.create_task(self._read())

    async def gather(self) -> list[bytes]:
        owner = self.owner
        deadline = time.time() + owner.rollout_timeout
        await self.client.watch_given_up(self._given_up)
        agents = sorted({task.agent for task in self.tasks})
        served = await owner.bus.served(agents, owner.timeouts.worker_start)
        for seq, task in enumerate(self.tasks):
            if task.agent in served:
                self.book.submitted(seq, deadline, task.body)
                await self.client.submit(task.agent, task.body, seq, 0, deadline)
            else:
                self._fill(seq, unserved_row(task.body, task.agent))
        await self.client.wait_submitted()
        try:
            async with asyncio.timeout(max(0.0, deadline + owner.grace - time.time())):
                await self.complete.wait()
        except TimeoutError:
            pass
        for seq, row in self.book.expire_all():
            self._fill(seq, row)
        return [row or b"" for row in self.rows]

    async def _read(self) -> None:
        async for results in self.client.results():
            for result in results:
                if self.book.settle(result.seq) is not None:
                    self._fill(result.seq, result.body)
            await self.client.ack(results)

    def _given_up(self, seq: int, deliveries: int) -> None:
        row = self.book.given_up(seq, deliveries)
        if row is not None:
            self._fill(seq, row)

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
