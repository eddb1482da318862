"""Where rollouts end up: the results stream of a run, written once each to the output files.

Results arrive on `gym.results.<run>` through a durable consumer. Each carries its
`Gym-Seq`, `Gym-Attempt` and the `Gym-Token` the runner signed its task with; a result
whose token is not the one this run's key gives that task is dropped unwritten (a forged
result: whoever made it never saw the task). The first result of a seq is written (rollouts or failures
file), any later one (a redelivered task that ran twice) is dropped. When resuming, a
result the files already hold (a key already written, or an attempt already counted as
failed) is dropped too: only the current attempt of a missing key is written. Writes are batched and flushed
before the batch is acked, so an acked result is always on disk; a crash between the
two only means the result is read again, and dropped, when the run resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import msgspec
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from gymbus.bus import Puller, check_out, pull_results, results_consumer, subjects, token_matches
from gymbus.schemas import (
    ATTEMPT,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    ROLLOUT_INDEX,
    SEQ,
    TASK_INDEX,
    TOKEN,
    Limits,
    PayloadTooLarge,
    Timeouts,
    header_int,
    merge_row,
    row_fields,
)

from ._ledger import Ledger
from ._metrics import Metrics, agent_of
from ._output import JsonlWriter, OutputPaths, Progressed
from ._progress import ProgressView

__all__ = ["FailureTally", "ResultSink"]

log = logging.getLogger("gymbus.collect")

_int_decoder = msgspec.json.Decoder(int)


_str_decoder = msgspec.json.Decoder(str)


class FailureTally:
    """Failure rows written, per `_ng_failure_class`, with the first message of each class."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def add(self, fields: dict[str, msgspec.Raw]) -> None:
        failure_class = _text(fields, FAILURE_CLASS) or "unknown"
        self.counts[failure_class] += 1
        if failure_class not in self.first:
            self.first[failure_class] = _text(fields, FAILURE_MESSAGE)


def _text(fields: dict[str, msgspec.Raw], name: str) -> str:
    try:
        return _str_decoder.decode(fields[name]) if name in fields else ""
    except msgspec.DecodeError:
        return bytes(fields[name]).decode(errors="replace")


class ResultSink:
    """Writes each rollout of a run once, and keeps the metrics and the progress bar."""

    def __init__(
        self,
        nc: Client,
        run: str,
        ledger: Ledger,
        paths: OutputPaths,
        metrics: Metrics,
        view: ProgressView,
        before: Progressed,
        key: bytes,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.nc = nc
        self.key = key
        self.forged = 0
        """Results dropped because their token did not match their task's."""
        self.limits = limits
        self.timeouts = timeouts
        self.before = before
        self.js = nc.jetstream()
        self.run = run
        self.ledger = ledger
        self.rollouts = JsonlWriter(paths.rollouts)
        self.failures = JsonlWriter(paths.failures)
        self.metrics = metrics
        self.failed = FailureTally()
        self.view = view
        self.pending: list[Msg] = []
        self.wake = asyncio.Event()
        self.puller: Puller | None = None
        self.closing = False
        self.loop_task: asyncio.Task[None] | None = None

    async def start(self, *, replay: bool) -> None:
        """Start consuming. `replay` re-reads every result the stream still holds for the run
        (resuming); otherwise results of an earlier run with the same id are purged first."""
        name = results_consumer(self.run)
        try:
            await self.js.delete_consumer(subjects.RESULTS_STREAM, name)
        except nats.js.errors.NotFoundError:
            pass
        if not replay:
            await self.js.purge_stream(subjects.RESULTS_STREAM, subject=subjects.results(self.run))
        self.puller = await pull_results(self.nc, self.run, self._queue, self.limits, self.timeouts)
        self.loop_task = asyncio.create_task(self._drain_forever())

    def _queue(self, msg: Msg) -> None:
        self.pending.append(msg)
        self.wake.set()

    async def _drain_forever(self) -> None:
        while not (self.closing and not self.pending):
            await self.wake.wait()
            self.wake.clear()
            batch, self.pending = self.pending, []
            if batch:
                await self._write_batch(batch)

    async def _write_batch(self, batch: list[Msg]) -> None:
        written = 0
        for msg in batch:
            try:
                body = await check_out(self.nc, msg.data, msg.headers, delete=False)
            except PayloadTooLarge as exc:
                log.error("dropped a result whose claimed body is gone: %s", exc)
                continue
            written += self._take(msg, body)
        await self.flush()  # on disk before acked
        for msg in batch:
            try:
                await msg.ack()
            except nats.errors.Error:
                pass  # not acked: redelivered later and dropped as a duplicate
        for _ in batch:
            assert self.puller is not None
            self.puller.done()
        if written:
            self.view.advance(written, self.metrics.mean_reward)

    def _take(self, msg: Msg, body: bytes) -> bool:
        headers = msg.headers or {}
        seq, attempt = header_int(headers, SEQ, -1), header_int(headers, ATTEMPT, 0)
        if self.ledger.is_settled(seq) or not 0 <= seq < self.ledger.total:
            return False  # a duplicate, or not of this run
        if not token_matches(self.key, self.run, seq, attempt, headers.get(TOKEN, "")):
            self.forged += 1
            if self.forged <= 10 or self.forged % 1000 == 0:
                log.warning("dropped a result for rollout %d that no task of this run asked for "
                            "(its token does not match; %d so far)", seq, self.forged)  # fmt: skip
            return False
        entry = self.ledger.in_flight.get(seq)
        try:
            fields = row_fields(body)
        except (msgspec.DecodeError, RecursionError):
            log.error("a result that is not a JSON object: %r", body[:200])
            if entry is None:
                return False
            body = entry.failure_row("agent_failed", "the agent worker's result is not a JSON object")
            fields = row_fields(body)
        if entry is not None and TASK_INDEX not in fields:
            # A failure row for a task the worker could not read: named from what was sent.
            body = merge_row(body, **entry.keys())
            fields = row_fields(body)
        key = _key(fields)
        if key in self.before.done or attempt != self.before.failed[key]:
            return False  # an earlier run's result, already in the files
        self.ledger.settle(seq)
        self._write(body, fields)
        return True

    def _write(self, row: bytes, fields: dict[str, msgspec.Raw]) -> None:
        agent = agent_of(fields)
        if FAILURE_CLASS in fields:
            self.failures.add(row)
            self.failed.add(fields)
            self.metrics.add_failure(agent)
        else:
            self.rollouts.add(row)
            self.metrics.add(agent, fields)

    def record(self, seq: int, row: bytes) -> None:
        """Settle `seq` with a row made by the runner itself (a bad input row, an expired task)."""
        if self.ledger.settle(seq) is not False:
            self._write(row, row_fields(row))
            self.view.advance(1, self.metrics.mean_reward)

    async def flush(self) -> None:
        await self.rollouts.flush()
        await self.failures.flush()

    async def stop(self, *, forget: bool) -> None:
        """Stop consuming and flush. `forget` deletes the run's consumer and results."""
        if self.puller is not None:
            await self.puller.stop()
        self.closing = True
        self.wake.set()
        if self.loop_task is not None:
            await self.loop_task  # the batch being written is finished, never cut
        await self.flush()
        if forget:
            await self._forget()

    async def _forget(self) -> None:
        try:
            await self.js.delete_consumer(subjects.RESULTS_STREAM, results_consumer(self.run))
            await self.js.purge_stream(subjects.RESULTS_STREAM, subject=subjects.results(self.run))
        except nats.errors.Error as exc:
            log.debug("could not clean up run %s: %s", self.run, type(exc).__name__)


def _key(fields: dict[str, msgspec.Raw]) -> tuple[int, int]:
    try:
        return (_int_decoder.decode(fields[TASK_INDEX]), _int_decoder.decode(fields[ROLLOUT_INDEX]))
    except (KeyError, msgspec.DecodeError):
        return (-1, -1)
