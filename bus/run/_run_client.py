"""The run protocol, client side: one object that a runner (`collect`, a trainer) holds
for a run, and the only code that publishes tasks or reads results.

    client = await RunClient.open(bus, "r1f0...", resume=False)
    await client.watch_given_up(on_given_up)     # optional
    await client.submit(agent, body, seq, attempt, deadline)
    async for results in client.results():     # verified, a batch at a time
        ...write them...
        await client.ack(results)                  # only once they are safe
    await client.close(forget=True)

A run is a set of tasks whose results come back to one consumer:

- **Submitting.** Each task goes to the durable work queue `gym.tasks.<agent>` with the
  headers `task_headers` makes: its message id `<run>.<seq>.<attempt>` (a repeat publish
  is deduplicated), where its result goes, its deadline, and a token signed with the
  run's key (`_runkeys`). Publishes are pipelined, at most `Limits.publish_window`
  unacknowledged; a body too big for one message goes by claim check.
- **Results.** A durable consumer per run reads `gym.results.<run>`. A result whose token
  is not the one the run's key gives its task is dropped unread (a forged result: whoever
  made it never saw the task), and so is one whose claimed body is gone; the others are
  handed over, a batch at a time, and acked only when the caller says they are safe, so
  an acked result is never lost.
- **Given up.** A task JetStream stopped delivering (its workers died on it `max_deliver`
  times) is reported to the caller (`watch_given_up`), which need not wait for a result
  that cannot come.
- **Resuming.** A run opened with `resume=True` keeps its stored key and its consumer,
  and reads the results the stream still holds (those no process of the run acked); a
  fresh one gets a new key and purges what an earlier run of the same id left. `close(forget=True)` withdraws the tasks still queued (a
  trainer's tasks admitted ahead, which no one will read) and deletes the run's consumer
  and results.
- **Progress.** A long-lived run's owner may keep a note of where it is (`save_progress`),
  which a resumed run reads back (`progress`); kept beside the run's key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gymbus.schemas import (
    ATTEMPT,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    RESULTS_MAX_AGE,
    SEQ,
    TOKEN,
    BusUnavailable,
    Limits,
    PayloadTooLarge,
    Timeouts,
    header_int,
)

from ..cluster import Connection, open_key_value
from ..connection import lost_for_good
from ..wire import check_out, ensure_claim_store, release_claim, subjects
from ._dead_letters import ExhaustedTasks
from ._publish import TaskPublisher, task_headers
from ._pull import Puller
from ._runkeys import RUNS_BUCKET, run_key, task_token, token_matches
from ._streams import ensure_streams, pull_results, results_consumer

if TYPE_CHECKING:
    from ..connection import Bus

__all__ = ["RunClient", "RunResult"]

log = logging.getLogger("gymbus.runs")


@dataclass(frozen=True)
class RunResult:
    """One verified result of the run: the task's `seq` and `attempt`, and the row."""

    seq: int
    attempt: int
    body: bytes
    message: Msg


class RunClient:
    """One run's tasks and results; see the module docstring. Make it with `open`."""

    def __init__(self, conn: Connection, run_id: str, key: bytes, limits: Limits, timeouts: Timeouts) -> None:
        self.conn = conn
        self.run_id = run_id
        self.key = key
        """The run's secret, which signs its tasks; another run may share it (`open(key=...)`)."""
        self.limits = limits
        self.timeouts = timeouts
        self.forged = 0
        """Results dropped because their token did not match their task's."""
        self.js = conn.js
        self.publisher = TaskPublisher(conn, limits.publish_window, timeouts, on_stored=self._stored)
        self.queued: dict[tuple[int, int], int] = {}
        """Stored tasks with no result yet: (seq, attempt) → their message's stream sequence."""
        self.puller: Puller | None = None
        self.pulled: Puller | None = None
        """The puller, kept after `stop_results` for the `done()` of results still held."""
        self.given_up: ExhaustedTasks | None = None
        self.arrived: list[Msg] = []
        self.wake = asyncio.Event()
        self.stopping = False
        self.purged_to = 0
        """The stream sequence up to which the run's acked results are purged."""
        self._acked = asyncio.Event()
        self._purged_last = False
        self._purging: asyncio.Task[None] | None = None
        self._runs: KeyValue | None = None

    @classmethod
    async def open(
        cls,
        bus: Bus,
        run_id: str,
        *,
        resume: bool = False,
        key: bytes | None = None,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> RunClient:
        """Open `run_id` and start reading its results. `key` signs its tasks (by default
        the run's own: a new one, or with `resume` the stored one)."""
        conn = bus.conn
        await ensure_streams(conn)
        await ensure_claim_store(conn)
        if key is None:
            key = await run_key(conn, run_id, fresh=not resume)
        client = cls(conn, run_id, key, limits, timeouts)
        await client._start_results(replay=resume)
        return client

    async def watch_given_up(self, given_up: Callable[[int, int], object]) -> None:
        """Call `given_up(seq, deliveries)` for each task of the run JetStream stopped
        delivering (its workers died on it every time), which will have no result."""
        self.given_up = ExhaustedTasks(self.conn, self.run_id, given_up)
        await self.given_up.start()

    # Submitting

    async def submit(self, agent: str, body: bytes, seq: int, attempt: int, deadline: float) -> None:
        """Publish task `seq` (its `attempt`-th try) of the run to `agent`'s work queue;
        its work is dropped past `deadline` (epoch seconds)."""
        token = task_token(self.key, self.run_id, seq, attempt)
        headers = task_headers(self.run_id, seq, attempt, deadline, token)
        await self.publisher.publish(subjects.tasks(agent), body, headers)

    def _stored(self, headers: dict[str, str], stream_seq: int) -> None:
        self.queued[header_int(headers, SEQ, -1), header_int(headers, ATTEMPT, 0)] = stream_seq

    async def withdraw(self) -> int:
        """Delete from the work queues the run's tasks that have no result yet, so no worker
        spends a rollout on a run that has ended; how many were still there. A task a
        worker is running finishes, but is not delivered again. Tasks whose publish is not
        acknowledged yet are waited for first: the server may have stored them already."""
        try:
            await self.publisher.wait_all()
        except BusUnavailable:
            pass  # the bus is away: what it stored stays, as below
        return await self._delete_queued(list(self.queued))

    async def withdraw_tasks(self, seqs: list[int]) -> int:
        """Delete tasks `seqs` (every attempt) from the work queues, where they still are:
        no one waits for them any more; how many were."""
        wanted = set(seqs)
        return await self._delete_queued([key for key in self.queued if key[0] in wanted])

    async def _delete_queued(self, keys: list[tuple[int, int]]) -> int:
        withdrawn = 0
        for key in keys:
            stream_seq = self.queued.pop(key, None)
            if stream_seq is None:
                continue
            try:
                withdrawn += await self.js.delete_msg(subjects.TASKS_STREAM, stream_seq)
            except (nats.errors.Error, TimeoutError):
                pass  # done and acked already (a work queue drops it then), or the bus is away
        return withdrawn

    async def check_submitted(self) -> None:
        """Check the publish acknowledgements that are in or overdue (republishing a task
        the server never stored), even while submitting waits."""
        await self.publisher.check_acks()

    async def wait_submitted(self) -> None:
        """Until every submitted task is stored by the server."""
        await self.publisher.wait_all()

    # Results

    async def _start_results(self, *, replay: bool) -> None:
        # A resumed run reads on through its consumer, which knows what the run acked:
        # those results may be purged already, and the others are what it still needs.
        # What an earlier process held unacked comes again after `Timeouts.result_ack_wait`.
        if not replay:
            try:
                await self.js.delete_consumer(subjects.RESULTS_STREAM, results_consumer(self.run_id))
            except nats.js.errors.NotFoundError:
                pass
            await self.js.purge_stream(subjects.RESULTS_STREAM, subject=subjects.results(self.run_id))
        self.puller = self.pulled = await pull_results(
            self.conn, self.run_id, self._arrive, self.limits, self.timeouts
        )
        self._purging = asyncio.create_task(self._purge_forever(), name=f"purging run {self.run_id}")

    def _arrive(self, msg: Msg) -> None:
        self.arrived.append(msg)
        self.wake.set()

    async def results(self) -> AsyncIterator[list[RunResult]]:
        """The run's verified results as they arrive, a batch at a time, until
        `stop_results`; acknowledge each batch with `ack` once its rows are safe."""
        while not (self.stopping and not self.arrived):
            await self.wake.wait()
            self.wake.clear()
            batch, self.arrived = self.arrived, []
            verified = await self._verified(batch)
            if verified:
                yield verified

    async def _verified(self, batch: list[Msg]) -> list[RunResult]:
        verified, dropped = [], []
        for msg in batch:
            try:
                result = await self._verify(msg)
            except BusUnavailable as exc:  # its claimed body could not be read now: later, then
                log.warning("a result's body could not be read (%s); it comes again", exc)
                if self.pulled is not None:
                    self.pulled.done()
                continue
            if result is None:
                dropped.append(msg)
            else:
                verified.append(result)
        await self._ack(dropped)
        return verified

    async def _verify(self, msg: Msg) -> RunResult | None:
        headers = msg.headers or {}
        seq, attempt = header_int(headers, SEQ, -1), header_int(headers, ATTEMPT, 0)
        if not token_matches(self.key, self.run_id, seq, attempt, headers.get(TOKEN, "")):
            self.forged += 1
            if self.forged <= 10 or self.forged % 1000 == 0:
                log.warning("dropped a result for task %d that no task of run %s asked for "
                            "(its token does not match; %d so far)", seq, self.run_id, self.forged)  # fmt: skip
            return None
        try:
            body = await check_out(self.conn, msg.data, msg.headers, release_it=False)
        except PayloadTooLarge as exc:
            log.error("dropped a result whose claimed body is gone: %s", exc)
            return None
        self.queued.pop((seq, attempt), None)
        return RunResult(seq, attempt, body, msg)

    async def ack(self, results: list[RunResult]) -> None:
        """Acknowledge `results`: the caller has them safe, they are not delivered again,
        their claimed bodies (if any) are freed, and they leave the bus (`_purge_acked`)."""
        await self._ack([result.message for result in results])
        for result in results:
            await release_claim(self.conn, result.message.headers)
        self._acked.set()

    async def _purge_forever(self) -> None:
        """Purge after acks, one purge at a time: under load one purge covers many batches,
        and an ack never waits for one. Ends, after a last purge, once `_purged_last` is
        set; it is never cancelled: nats-py 2.16 fails its read loop on the PONG of a flush
        whose waiter was cancelled (`InvalidStateError`)."""
        while True:
            await self._acked.wait()
            self._acked.clear()
            await self._purge_acked()
            if self._purged_last:
                return

    async def _purge_acked(self) -> None:
        """Delete the run's results up to its consumer's ack floor (every one before it is
        acked), so a long run keeps on the bus only what it has not read yet."""
        try:
            # The acks are in: the floor counts them.
            await self.conn.client.flush(timeout=int(self.timeouts.connect))
            info = await self.js.consumer_info(subjects.RESULTS_STREAM, results_consumer(self.run_id))
            floor = info.ack_floor.stream_seq if info.ack_floor and info.ack_floor.stream_seq else 0
            if floor > self.purged_to:
                await self.js.purge_stream(
                    subjects.RESULTS_STREAM, seq=floor + 1, subject=subjects.results(self.run_id)
                )
                self.purged_to = floor
        except (nats.errors.Error, TimeoutError) as exc:
            log.debug("could not purge the acked results of run %s: %s", self.run_id, type(exc).__name__)

    async def _ack(self, messages: list[Msg]) -> None:
        for msg in messages:
            try:
                await msg.ack()
            except nats.errors.Error:
                pass  # delivered again after result_ack_wait, and dropped as a duplicate
        if self.pulled is not None:
            for _ in messages:
                self.pulled.done()

    async def stop_results(self) -> None:
        """Stop reading results; `results()` ends once those already read are handed over."""
        puller, self.puller = self.puller, None
        if puller is not None:
            await puller.stop()
        if self.given_up is not None:
            await self.given_up.stop()
            self.given_up = None
        self.stopping = True  # after the puller: what it delivered until then is handed over
        self.wake.set()

    # Progress

    async def progress(self) -> bytes | None:
        """What `save_progress` last kept for this run (a fresh run has none)."""
        try:
            entry = await (await self._runs_bucket()).get(self._progress_key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value or None

    async def save_progress(self, data: bytes) -> bool:
        """Keep `data`, where the run's owner is, for a resumed run to read back; whether
        the bus took it (a reconnecting connection may not)."""
        try:
            await (await self._runs_bucket()).put(self._progress_key, data)
        except (nats.errors.Error, TimeoutError) as exc:
            log.debug("could not save the progress of run %s: %s", self.run_id, type(exc).__name__)
            return False
        return True

    async def _runs_bucket(self) -> KeyValue:
        if self._runs is None:
            self._runs = await open_key_value(self.conn, RUNS_BUCKET, RESULTS_MAX_AGE)
        return self._runs

    @property
    def _progress_key(self) -> str:
        return f"{self.run_id}.progress"

    async def lost_for_good(self, window: float) -> None:
        """Return once the bus has been gone `window` seconds on end (`lost_for_good`): the
        results still awaited cannot come. Never returns while the connection stays up."""
        await lost_for_good(self.conn, window)

    async def close(self, *, forget: bool) -> None:
        """Stop reading results; `forget` also withdraws its tasks still queued and deletes
        the run's consumer, results and progress."""
        await self.stop_results()
        if self._purging is not None:
            self._purged_last = True  # what the run wrote is not read again: purged
            self._acked.set()
            await self._purging
        if forget:
            withdrawn = await self.withdraw()
            if withdrawn:
                log.info("withdrew %d queued task(s) of run %s", withdrawn, self.run_id)
            try:
                await self.js.delete_consumer(subjects.RESULTS_STREAM, results_consumer(self.run_id))
                await self.js.purge_stream(subjects.RESULTS_STREAM, subject=subjects.results(self.run_id))
                await (await self._runs_bucket()).delete(self._progress_key)
            except nats.errors.Error as exc:
                log.debug("could not clean up run %s: %s", self.run_id, type(exc).__name__)
