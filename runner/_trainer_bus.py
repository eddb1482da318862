"""A trainer's batch of rollouts, through the durable task queue, as `collect` sends them.

Each task row of a batch is published to `gym.tasks.<agent>` (the JetStream work queue
agent workers pull from) with `task_headers(run, seq, 0, deadline)`, one run per batch;
results come back on `gym.results.<run>` through a durable consumer made for the batch.
A worker killed mid-rollout never acks its task, so the queue gives it to another worker
after the agent's `ack_wait`: the batch waits for the redelivered rollout instead of
losing it. Tasks are signed as `collect` signs them (`bus.task_token`, with a key per
trainer process kept in the runners' `gym_runs` bucket), and a result without its task's
signature is dropped. A row whose agent no worker serves (after waiting `Timeouts.worker_start` for
one), or whose result has not come by its deadline (plus a grace), becomes a failure row;
a batch always returns one row per task.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from gymbus.bus import (
    Puller,
    TaskPublisher,
    check_out,
    ensure_streams,
    failure_row,
    model_servers,
    pull_results,
    results_consumer,
    run_key,
    subjects,
    task_headers,
    task_token,
    token_matches,
)
from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    SEQ,
    TOKEN,
    Limits,
    PayloadTooLarge,
    Timeouts,
    header_int,
)

from ._workers import is_served

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
        nc: Client,
        *,
        rollout_timeout: float = DEFAULT_TIMEOUTS.rollout,
        grace: float = 15.0,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=timeouts.connect)
        self.rollout_timeout = rollout_timeout
        self.grace = grace
        self.limits = limits
        self.timeouts = timeouts
        # A fresh prefix per trainer process: a restarted trainer never reads an old run's results.
        self.prefix = "trl-" + uuid.uuid4().hex[:12]
        self.batches = 0
        self.key = b""
        """The secret the batches' tasks are signed with, made on the first batch."""
        self.forged = 0
        """Results dropped because their signature did not match their task's."""

    async def model_servers(self, agents: set[str]) -> dict[str, set[str]]:
        """The inference servers of the models `agents` call, as their live services list them."""
        return await model_servers(self.nc, agents, self.timeouts.discovery)

    async def run(self, tasks: Sequence[BatchTask]) -> list[bytes]:
        """Every task's rollout row (or failure row), in the order of `tasks`."""
        if not self.key:
            await ensure_streams(self.js)
            self.key = await run_key(self.js, self.prefix, fresh=True)
        run = f"{self.prefix}-{self.batches}"
        self.batches += 1
        batch = _Batch(self, run, tasks)
        await batch.start()
        try:
            return await batch.gather()
        finally:
            await batch.stop()


class _Batch:
    """One batch's run: its results consumer, its publishes, and the rows as they come."""

    def __init__(self, owner: TaskBatches, run: str, tasks: Sequence[BatchTask]) -> None:
        self.owner = owner
        self.nc = owner.nc
        self.run = run
        self.tasks = tasks
        self.rows: list[bytes | None] = [None] * len(tasks)
        self.missing = len(tasks)
        self.complete = asyncio.Event()
        self.puller: Puller | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        owner = self.owner
        self.puller = await pull_results(self.nc, self.run, self._spawn, owner.limits, owner.timeouts)

    async def gather(self) -> list[bytes]:
        owner = self.owner
        deadline = time.time() + owner.rollout_timeout
        served = await _wait_served(self.nc, {task.agent for task in self.tasks}, owner.timeouts.worker_start)
        publisher = TaskPublisher(self.nc, owner.limits.publish_window, owner.timeouts)
        for seq, task in enumerate(self.tasks):
            if served[task.agent]:
                token = task_token(owner.key, self.run, seq, 0)
                headers = task_headers(self.run, seq, 0, deadline, token)
                await publisher.publish(subjects.tasks(task.agent), task.body, headers)
            else:
                message = (
                    f"no worker serves {subjects.agent_run(task.agent)}: start one with `gym-runner serve`"
                )
                self._settle(seq, failure_row(task.body, "no_worker", message))
        await publisher.wait_all()
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

    def _settle(self, seq: int, row: bytes) -> None:
        if 0 <= seq < len(self.rows) and self.rows[seq] is None:
            self.rows[seq] = row
            self.missing -= 1
            if self.missing == 0:
                self.complete.set()

    def _spawn(self, msg: Msg) -> None:
        handler = asyncio.create_task(self._take(msg))
        self.handlers.add(handler)
        handler.add_done_callback(self._handled)

    def _handled(self, handler: asyncio.Task[None]) -> None:
        self.handlers.discard(handler)
        if self.puller is not None:
            self.puller.done()

    async def _take(self, msg: Msg) -> None:
        try:
            body = await check_out(self.nc, msg.data, msg.headers, delete=False)
        except PayloadTooLarge as exc:
            log.error("a result whose claimed body is gone was dropped: %s", exc)
        else:
            headers = msg.headers or {}
            seq = header_int(headers, SEQ, -1)
            if token_matches(self.owner.key, self.run, seq, 0, headers.get(TOKEN, "")):
                self._settle(seq, body)
            else:
                self.owner.forged += 1
                log.warning("dropped a result for task %d that no task of this batch asked for", seq)
        try:
            await msg.ack()
        except nats.errors.Error:
            pass  # sent again after result_ack_wait, and then dropped as a duplicate

    async def stop(self) -> None:
        """Stop consuming, and delete the batch's consumer and results."""
        if self.puller is not None:
            await self.puller.stop()
        if self.handlers:
            await asyncio.gather(*self.handlers, return_exceptions=True)
        js = self.owner.js
        try:
            await js.delete_consumer(subjects.RESULTS_STREAM, results_consumer(self.run))
            await js.purge_stream(subjects.RESULTS_STREAM, subject=subjects.results(self.run))
        except nats.errors.Error as exc:
            log.debug("could not clean up batch %s: %s", self.run, type(exc).__name__)


async def _wait_served(nc: Client, agents: set[str], timeout: float) -> dict[str, bool]:
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
