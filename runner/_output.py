"""The output files, named from `--output` exactly as NeMo Gym names them.

    <out>.jsonl                         rewarded rollouts, in completion order
    <stem>_failures.jsonl               rollouts that failed, and input rows that could not run
    <stem>_materialized_inputs.jsonl    every task as sent (stamped with its indices)
    <stem>_aggregate_metrics.json       per-agent metrics
    <stem>_workers.log                  the output of the workers `collect` started itself
    <stem>_plan.json                    what was asked (input, --num-repeats, --limit, --agent),
                                        which `--resume` must find unchanged

Lines are written whole: a crash leaves at most one partial last line, which resuming
cuts off before appending, and a write the disk cannot hold (ENOSPC) is cut back off at
once, its error naming the file. The materialized inputs are written to
`<stem>_materialized_inputs.jsonl.partial` while tasks are published and take their name
only once every planned rollout is in them, one line each, in order; the metrics file is
replaced whole. So a full disk, a kill or Ctrl-C never leaves a sidecar half-written, and
`--resume` writes them afresh.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiofiles
import msgspec

from gymbus.schemas import RolloutSummary, row_fields

from ._input import read_lines
from ._metrics import Metrics, agent_of

__all__ = [
    "JsonlWriter",
    "MaterializedInputs",
    "OutputPaths",
    "Progressed",
    "WriteFailed",
    "read_progress",
    "sidecar",
    "write_whole",
]

_summary_decoder = msgspec.json.Decoder(RolloutSummary)


def sidecar(output: Path, suffix: str) -> Path:
    """The file beside `output` named as NeMo Gym names its sidecars: `<stem>_<suffix>`
    (`failures.jsonl`, `aggregate_metrics.json`, `materialized_inputs.jsonl`, ...)."""
    return output.with_name(f"{output.stem}_{suffix}")


@dataclass(frozen=True)
class OutputPaths:
    rollouts: Path
    failures: Path
    materialized: Path
    metrics: Path
    workers_log: Path
    plan: Path

    @classmethod
    def for_output(cls, output: Path) -> OutputPaths:
        return cls(
            rollouts=output,
            failures=sidecar(output, "failures.jsonl"),
            materialized=sidecar(output, "materialized_inputs.jsonl"),
            metrics=sidecar(output, "aggregate_metrics.json"),
            workers_log=sidecar(output, "workers.log"),
            plan=sidecar(output, "plan.json"),
        )

    @property
    def materialized_partial(self) -> Path:
        """The materialized inputs while they are written (renamed once complete)."""
        return self.materialized.with_name(self.materialized.name + ".partial")

    def start_fresh(self) -> None:
        """Remove the files of an earlier run (collecting without `--resume`)."""
        for path in (
            self.rollouts,
            self.failures,
            self.materialized,
            self.metrics,
            self.workers_log,
            self.plan,
        ):
            path.unlink(missing_ok=True)


class WriteFailed(OSError):
    """An output file could not be written (the disk is full, say); names the file."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


class JsonlWriter:
    """Appends lines, buffered; `flush()` appends the buffer whole or not at all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.buffer: list[bytes] = []
        self.lines = 0

    def add(self, line: bytes) -> None:
        self.buffer.append(line)
        self.buffer.append(b"\n")
        self.lines += 1

    async def flush(self) -> None:
        """Append what is buffered. `WriteFailed` leaves the file as it was (a partial write
        is cut back off) and keeps the buffer."""
        if not self.buffer:
            return
        await _append_whole(self.path, b"".join(self.buffer))
        self.buffer.clear()


class MaterializedInputs:
    """Every planned rollout's task as sent, one line each in plan order, written under a
    temporary name and given the file's own only once complete (`complete()`); anything
    less is thrown away (`abandon()`), leaving the last complete file."""

    FLUSH_LINES = 2048

    def __init__(self, paths: OutputPaths) -> None:
        self.path = paths.materialized
        self.writer = JsonlWriter(paths.materialized_partial)
        self.writer.path.unlink(missing_ok=True)

    async def add(self, task: bytes) -> None:
        self.writer.add(task)
        if self.writer.lines % self.FLUSH_LINES == 0:
            await self.writer.flush()

    async def complete(self) -> None:
        await self.writer.flush()
        if not self.writer.path.exists():
            self.writer.path.touch()  # no rollout planned: an empty file says so
        try:
            os.replace(self.writer.path, self.path)
        except OSError as exc:
            raise WriteFailed(exc.errno, exc.strerror, str(self.path)) from None

    def abandon(self) -> None:
        self.writer.buffer.clear()
        self.writer.path.unlink(missing_ok=True)


async def _append_whole(path: Path, data: bytes) -> None:
    try:
        async with aiofiles.open(path, "ab", buffering=0) as f:
            start = await f.tell()
            try:
                rest = memoryview(data)
                while rest:
                    rest = rest[await f.write(rest) :]
            except OSError:
                await f.truncate(start)
                raise
    except OSError as exc:
        raise WriteFailed(exc.errno, exc.strerror, str(path)) from None


async def write_whole(path: Path, data: bytes) -> None:
    """Replace `path` with `data` at once: a reader (or a full disk) never sees half of it."""
    partial = path.with_name(path.name + ".partial")
    try:
        async with aiofiles.open(partial, "wb") as f:
            await f.write(data)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise WriteFailed(exc.errno, exc.strerror, str(path)) from None


@dataclass
class Progressed:
    """What earlier runs wrote: keys done, failed attempts per key, and the input lines
    that could not run (their failure rows are written once, not once per resume)."""

    done: set[tuple[int, int]]
    failed: Counter[tuple[int, int]]
    bad_lines: set[int] = field(default_factory=set)


def _cut_partial_line(path: Path, chunk: int = 1 << 16) -> None:
    """Cut a crash's half-written last line, reading back from the end only as far as the
    last newline (the file may be gigabytes)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        start = end
        while start > 0:
            start = max(0, start - chunk)
            f.seek(start)
            newline = f.read(min(chunk, end - start)).rfind(b"\n")
            if newline >= 0:
                f.truncate(start + newline + 1)
                return
        f.truncate(0)


async def _rows(path: Path) -> AsyncIterator[tuple[RolloutSummary, dict[str, msgspec.Raw]]]:
    _cut_partial_line(path)
    if not path.exists():
        return
    async for _, line in read_lines(path):
        try:
            yield _summary_decoder.decode(line), row_fields(line)
        except msgspec.DecodeError:
            continue


def _key(summary: RolloutSummary) -> tuple[int, int] | None:
    if isinstance(summary.task_index, int) and isinstance(summary.rollout_index, int):
        return summary.task_index, summary.rollout_index
    return None


async def read_progress(paths: OutputPaths, metrics: Metrics) -> Progressed:
    """The keys already written to the rollouts file, failures counted per key, and the
    bad input lines already reported; their rows are added to `metrics`, so the run's
    metrics cover the whole output file."""
    progressed = Progressed(done=set(), failed=Counter())
    async for summary, fields in _rows(paths.rollouts):
        key = _key(summary)
        if key is not None:
            progressed.done.add(key)
            metrics.add(agent_of(fields), fields)
    async for summary, fields in _rows(paths.failures):
        key = _key(summary)
        if key is not None:
            progressed.failed[key] += 1
        elif isinstance(summary.input_line, int):
            progressed.bad_lines.add(summary.input_line)
        else:
            continue
        metrics.add_failure(agent_of(fields))
    return progressed
