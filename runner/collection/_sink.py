"""Where rollouts end up: the run's verified results, written once each to the output files.

Results come from the run's `bus.RunClient`, which has already dropped forged ones. The
first result of a seq is written (rollouts or failures file), any later one (a
redelivered task that ran twice) is dropped. When resuming, a result the files already
hold (a key already written, or an attempt already counted as failed) is dropped too:
only the current attempt of a missing key is written. Writes are batched and flushed
before the batch is acked, so an acked result is always on disk; a crash between the
two only means the result is read again, and dropped, when the run resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import msgspec

from gymbus.bus import RunClient, RunResult
from gymbus.schemas import (
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    ROLLOUT_INDEX,
    TASK_INDEX,
    merge_row,
    row_fields,
)

from .._metrics import Metrics, agent_of
from .._output import JsonlWriter, OutputPaths, Progressed
from .._progress import ProgressView
from ._ledger import Ledger

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
        client: RunClient,
        ledger: Ledger,
        paths: OutputPaths,
        metrics: Metrics,
        view: ProgressView,
        before: Progressed,
    ) -> None:
        self.client = client
        self.before = before
        self.ledger = ledger
        self.rollouts = JsonlWriter(paths.rollouts)
        self.failures = JsonlWriter(paths.failures)
        self.metrics = metrics
        self.failed = FailureTally()
        self.view = view
        self.loop_task: asyncio.Task[None] | None = None
        self.restarts_said = 0

    def start(self) -> None:
        """Start writing the run's results as they come."""
        self.loop_task = asyncio.create_task(self._write_forever())

    async def _write_forever(self) -> None:
        async for batch in self.client.results():
            await self._write_batch(batch)

    async def _write_batch(self, batch: list[RunResult]) -> None:
        written = sum(self._take(result) for result in batch)
        await self.flush()  # on disk before acked
        await self.client.ack(batch)
        self.ledger.free_settled()  # written and off the bus: their slots take new rollouts
        if written:
            self.view.advance(written, self.metrics.mean_reward)

    def _take(self, result: RunResult) -> bool:
        seq, attempt, body = result.seq, result.attempt, result.body
        if self.ledger.is_settled(seq) or not 0 <= seq < self.ledger.total:
            return False  # a duplicate, or not of this run
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
            body = merge_row(body, **entry.fields)
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
            self.metrics.add_failure(agent, fields)
        else:
            self.rollouts.add(row)
            self.metrics.add(agent, fields)
        self._say_restarts()

    def _say_restarts(self) -> None:
        """Say on the terminal when rollouts start over often (3 or more, and 5% of those
        written), and again each time their number doubles: each paid its model calls again."""
        restarts = self.metrics.restarts
        written = self.rollouts.lines + self.failures.lines
        if restarts >= max(3, 2 * self.restarts_said) and restarts >= 0.05 * written:
            self.restarts_said = restarts
            self.view.note(
                f"{restarts:,} rollout restart(s) so far ({written:,} rollouts written): a call's "
                "worker went silent mid-call (busy past its keep-alives, or dead); see the workers' logs"
            )

    def record(self, seq: int, row: bytes) -> None:
        """Settle `seq` with a row made by the runner itself (a bad input row, an expired task)."""
        if self.ledger.settle(seq):
            self._write(row, row_fields(row))
            self.ledger.free_settled()  # no result of it is on the bus
            self.view.advance(1, self.metrics.mean_reward)

    async def flush(self) -> None:
        await self.rollouts.flush()
        await self.failures.flush()

    async def stop(self, *, forget: bool) -> None:
        """Stop reading results and flush. `forget` deletes the run's consumer and results."""
        await self.client.stop_results()
        if self.loop_task is not None:
            await self.loop_task  # the batch being written is finished, never cut
        await self.flush()
        await self.client.close(forget=forget)


def _key(fields: dict[str, msgspec.Raw]) -> tuple[int, int]:
    try:
        return (_int_decoder.decode(fields[TASK_INDEX]), _int_decoder.decode(fields[ROLLOUT_INDEX]))
    except (KeyError, msgspec.DecodeError):
        return (-1, -1)
