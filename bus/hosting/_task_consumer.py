"""Durable rollout tasks, the worker side of the task queue (the streams are `_streams`').

An agent worker pulls from a durable consumer per agent, sends `in_progress` while a
rollout runs (so a slow rollout is not taken for a dead one), publishes the result,
and only then acks. A worker killed mid-rollout never acks: after `ack_wait` the task
goes to another worker; so does one whose agent cannot run any more in this worker
(`AgentUnavailable`: a hosted agent's process died). Every other task a worker gets ends
as a result, a rollout or a failure row: a body that is not a task (not JSON, nested deeper than `Limits.max_depth`,
its claimed body gone) or an agent that raises is a failure row, never a crashed handler
and an unacknowledged task. Only a task whose worker dies on it `max_deliver` times is
left to the runner, which hears of it from JetStream's MAX_DELIVERIES advisory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.micro.service import EndpointInfo, EndpointStats

from gymbus.functions import AgentUnavailable
from gymbus.schemas import (
    ATTEMPT,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    DELIVERY,
    MSG_ID,
    RESULT_RETRY,
    RESULTS_MAX_AGE,
    RUN,
    SEQ,
    TASK,
    TOKEN,
    BusUnavailable,
    ClaimStoreFull,
    Limits,
    PayloadTooLarge,
    Timeouts,
    failure_row,
    task_id,
)

from ..cluster import Connection
from ..run import Puller, add_pull_consumer, ensure_streams
from ..wire import (
    check_in_when_room,
    check_out,
    needs_claim,
    nested_deeper,
    release_claim,
    retrying,
    subjects,
)
from ._rollout import RolloutHandler
from ._services import EndpointCounts

__all__ = ["TaskConsumer", "agent_consumer"]

log = logging.getLogger("gymbus.tasks")


def agent_consumer(agent: str) -> str:
    """The durable consumer all workers of `agent` share."""
    return f"gym-agent-{subjects.check_name(agent, 'agent')}"


async def _ensure_agent_consumer(conn: Connection, agent: str, limits: Limits, timeouts: Timeouts) -> str:
    return await add_pull_consumer(
        conn, subjects.TASKS_STREAM, agent_consumer(agent), subjects.tasks(agent),
        ack_wait=timeouts.ack_wait, max_ack_pending=limits.max_ack_pending,
        max_deliver=limits.max_deliver, max_waiting=limits.max_waiting,
    )  # fmt: skip


class TaskConsumer:
    """Runs the tasks of one agent from the queue, `limits.agent_concurrency` at a time."""

    def __init__(
        self,
        conn: Connection,
        agent: str,
        handle: RolloutHandler,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.conn = conn
        self.js = conn.js
        self.agent = agent
        self.handle = handle
        self.limits = limits
        self.timeouts = timeouts
        self.tasks: set[asyncio.Task[None]] = set()
        self.puller: Puller | None = None
        self.counts = EndpointCounts()
        self.unrouted = 0
        """Tasks that named no run: their results went to `gym.results.unrouted`."""

    async def start(self) -> None:
        await ensure_streams(self.conn)
        consumer = await _ensure_agent_consumer(self.conn, self.agent, self.limits, self.timeouts)
        self.puller = Puller(
            self.conn,
            subjects.TASKS_STREAM,
            consumer,
            capacity=self.limits.agent_concurrency,
            on_message=self._spawn,
            batch=self.limits.fetch_batch,
            timeouts=self.timeouts,
        )
        await self.puller.start()
        log.info("agent %s takes tasks from %s", self.agent, subjects.tasks(self.agent))

    async def stop(self) -> None:
        """Stop taking tasks; let running rollouts finish for up to `timeouts.drain` s.
        Unfinished ones are not acked, so another worker will run them."""
        if self.puller is not None:
            await self.puller.stop()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=self.timeouts.drain)
        for task in list(self.tasks):
            task.cancel()

    def _spawn(self, msg: Msg) -> None:
        task = asyncio.create_task(self._handle(msg))
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self.puller is not None:
            self.puller.done()
        if not task.cancelled() and task.exception() is not None:
            log.error("a task handler failed", exc_info=task.exception())

    async def _handle(self, msg: Msg) -> None:
        started = time.perf_counter_ns()
        self.counts.num_requests += 1
        headers = {**(msg.headers or {}), DELIVERY: str(_deliveries(msg)), TASK: _stream_seq(msg)}
        heartbeat = asyncio.create_task(self._keep_alive(msg))
        try:
            result = await self._result_of(msg, headers)
            await self._publish_result(headers, result)
            await msg.ack()
            await release_claim(self.conn, msg.headers)  # acked: the task is not delivered again
        except AgentUnavailable as exc:
            # Not acked, no heartbeat: the task goes to another worker once ack_wait passes.
            log.warning("task %s goes back to the queue: %s", headers.get(SEQ), exc)
            self.counts.failed(f"agent unavailable: {exc}")
        except (nats.errors.Error, TimeoutError, BusUnavailable, PayloadTooLarge) as exc:
            # Not acked: the task is redelivered once ack_wait passes.
            log.warning("could not deliver the result of task %s: %s", headers.get(SEQ), exc)
            self.counts.failed(f"result not delivered: {exc}")
        finally:
            heartbeat.cancel()
            self.counts.processing_ns += time.perf_counter_ns() - started

    async def _result_of(self, msg: Msg, headers: Mapping[str, str]) -> bytes:
        """The task's rollout row, or a failure row saying why it could not run. Raises only
        what makes the task worth delivering again (the bus is away)."""
        try:
            row = await check_out(self.conn, msg.data, msg.headers, release_it=False)
        except PayloadTooLarge as exc:
            return failure_row(b"", "invalid_input", f"the task's body could not be read: {exc}")
        if nested_deeper(row, self.limits.max_depth):
            message = f"the task nests deeper than {self.limits.max_depth} levels"
            return failure_row(b"", "invalid_input", message)
        try:
            return await self.handle(row, headers)
        except AgentUnavailable:
            raise
        except Exception as exc:  # a rollout handler's bug costs its task a failure row, not the task
            log.exception("running task %s failed", headers.get(SEQ))
            message = f"the agent worker raised {type(exc).__name__} running the task; see its log"
            return failure_row(row, "agent_failed", message)

    def info(self) -> EndpointInfo:
        return EndpointInfo(
            name="tasks", subject=subjects.tasks(self.agent), queue_group=agent_consumer(self.agent)
        )

    def stats(self) -> EndpointStats:
        """The queue's tasks as one more endpoint of the agent's service in `$SRV.STATS`:
        errors are results that could not be delivered (the task runs again elsewhere)."""
        return self.counts.stats("tasks", subjects.tasks(self.agent), agent_consumer(self.agent))

    async def _keep_alive(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.timeouts.ack_wait / 3)
            try:
                await msg.in_progress()
            except nats.errors.Error:
                pass  # disconnected; the next beat may get through

    async def _publish_result(self, headers: Mapping[str, str], result: bytes) -> None:
        """Publish a result durably, retrying while the bus is away (a result is worth
        more than the seconds it takes): the message id makes a repeat harmless.

        A task that named no run (or one that is not a subject token) still has its
        result kept, on `gym.results.unrouted`; one without `Gym-Seq` is told apart from
        the others by `Gym-Task`, its place in the task stream."""
        run_id, seq, attempt = headers.get(RUN, ""), headers.get(SEQ, ""), headers.get(ATTEMPT, "0")
        task = headers.get(TASK, "")
        if not subjects.is_name(run_id):
            self._unrouted(run_id, task)
            run_id = subjects.UNROUTED_RUN
        out = {ATTEMPT: attempt, TASK: task, MSG_ID: task_id(run_id, seq or "t" + task, attempt)}
        if seq:
            out[SEQ] = seq
        token = headers.get(TOKEN)
        if token:
            # The token in the id too: a forged result published first under the plain id
            # cannot make JetStream drop the real one as its duplicate.
            out.update({TOKEN: token, MSG_ID: f"{task_id(run_id, seq, attempt)}.{token}"})
        if needs_claim(self.conn, result):
            result, out = await self._claimed(run_id, result, out)

        async def once() -> None:
            try:
                await self.js.publish(
                    subjects.results(run_id), result, headers=out, timeout=self.timeouts.connect
                )
            except (nats.errors.Error, TimeoutError) as exc:
                raise BusUnavailable(f"result not stored ({type(exc).__name__})") from None

        await retrying(once, RESULT_RETRY, should_retry=lambda error: True)

    async def _claimed(self, run_id: str, result: bytes, out: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        """The result by claim check, kept until its runner reads it; if the claim store stays
        full, a failure row that says so in its place (small enough for one message)."""
        try:
            return await check_in_when_room(
                self.conn, subjects.results(run_id), result, out, ttl=RESULTS_MAX_AGE
            )
        except (ClaimStoreFull, PayloadTooLarge) as exc:
            message = f"the rollout's result of {len(result)} bytes could not be stored: {exc}"
            return failure_row(b"", exc.type, message), out

    def _unrouted(self, run_id: str, task: str) -> None:
        self.unrouted += 1
        if self.unrouted <= 10 or self.unrouted % 1000 == 0:
            why = f"an invalid Gym-Run {run_id!r}" if run_id else "no Gym-Run header"
            log.warning("task %s of %s had %s: its result goes to %s (%d so far)", task, self.agent, why,
                        subjects.results(subjects.UNROUTED_RUN), self.unrouted)  # fmt: skip


def _stream_seq(msg: Msg) -> str:
    try:
        return str(msg.metadata.sequence.stream)
    except (ValueError, TypeError, AttributeError):
        return ""


def _deliveries(msg: Msg) -> int:
    try:
        return int(msg.metadata.num_delivered)
    except (ValueError, TypeError, AttributeError):
        return 1
