"""`gym-runner prepare`: validate datasets, stamp `agent_ref`, blend, shuffle, split, and
write NeMo Gym's dataset metrics, in `gym dataset collate`'s layout:

    <out>/train.jsonl                the prepared rows (all of them without a split)
    <out>/train_metrics.json         NeMo Gym's dataset metrics of train.jsonl
    <out>/validation.jsonl           the held-out rows (with --validation-fraction/-count)
    <out>/validation_metrics.json
    <out>/bad_rows.txt               every row that is left out, as `file:line: field: why` (only
                                     when some row is)

Rows are checked exactly as `collect` checks them, so a prepared file runs as it is. A
bad row never stops the others: it is reported and left out. Sources are read twice
(validate, then write) and never held in memory: the blend is shuffled as a permutation
of row numbers (`--seed`), and each row is then read back from its file by offset.
Rows keep their exact bytes unless something is stamped on them: `agent_ref` where a row
has none, and, when several sources are blended, `_ng_task_index` and
`_ng_rollout_index` are removed (each source numbered its own tasks from 0, so the
blend's would collide; `collect` numbers the blend afresh).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import msgspec

from gymbus.schemas import AGENT_REF, ROLLOUT_INDEX, TASK_INDEX, AgentRef, InputError, row_fields

from .._console import LISTED
from ._metrics import DatasetMetrics
from ._sources import Scanned, Source, download_hf, read_line, scan

__all__ = ["PrepareOptions", "PrepareReport", "prepare"]

_encode = msgspec.json.Encoder().encode
_null = msgspec.Raw(b"null")


@dataclass(frozen=True)
class PrepareOptions:
    sources: tuple[Source, ...]
    output_dir: Path
    seed: int = 0
    shuffle: bool = True
    balance: bool = False
    """Take as many rows from each source as the smallest has (a random sample of the others)."""
    validation_fraction: float | None = None
    validation_count: int | None = None


@dataclass(frozen=True)
class SourceTally:
    name: str
    good: int
    bad: int
    used: int


@dataclass
class PrepareReport:
    """What `prepare` read and wrote. `bad_listed` holds the first `LISTED` bad rows."""

    output_dir: Path
    sources: list[SourceTally] = field(default_factory=list)
    bad: int = 0
    bad_listed: list[str] = field(default_factory=list)
    train_rows: int = 0
    validation_rows: int = 0
    stamped: int = 0
    """Rows that got `agent_ref` from `--agent` (or their source's `=AGENT`)."""
    renumbered: int = 0
    """Rows whose `_ng_task_index` / `_ng_rollout_index` were removed from a blend."""

    @property
    def train(self) -> Path:
        return self.output_dir / "train.jsonl"

    @property
    def validation(self) -> Path:
        return self.output_dir / "validation.jsonl"

    @property
    def bad_rows(self) -> Path:
        return self.output_dir / "bad_rows.txt"

    @staticmethod
    def metrics_of(path: Path) -> Path:
        return path.with_name(f"{path.stem}_metrics.json")


def prepare(options: PrepareOptions) -> PrepareReport:
    """Prepare `options.sources` into `options.output_dir` (see the module docstring).
    `ValueError` for what stops it before any row is written (a source that cannot be
    read, a split larger than the data); bad rows never do."""
    report = PrepareReport(options.output_dir)
    options.output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gymbus-prepare-") as downloads:
        sources = [
            download_hf(one, Path(downloads)) if one.hf_repo else _readable(one, report)
            for one in options.sources
        ]
        with open(report.bad_rows, "w") as bad_rows:
            scanned = [scan(source, lambda error: _note_bad(report, bad_rows, error)) for source in sources]
        if not report.bad:
            report.bad_rows.unlink()  # no bad row: no file to open and find empty (nor an earlier run's)
        picked = _pick(scanned, options, report.bad_rows)
        report.sources = [
            SourceTally(one.source.name, one.good, one.bad, len(rows))
            for one, rows in zip(scanned, picked, strict=True)
        ]
        order = _order(scanned, picked, options)
        held_out = _held_out(len(order), report, options)
        _write(report, scanned, order, held_out, blended=len(sources) > 1)
    return report


def _readable(source: Source, report: PrepareReport) -> Source:
    if not source.path.is_file():
        raise ValueError(f"input file not found: {source.path}")
    if source.path.resolve() in {report.train.resolve(), report.validation.resolve()}:
        raise ValueError(f"{source.path} is an input: write the prepared files to another --output-dir")
    return source


def _note_bad(report: PrepareReport, out: IO[str], error: InputError) -> None:
    report.bad += 1
    if len(report.bad_listed) < LISTED:
        report.bad_listed.append(str(error))
    out.write(f"{error}\n")


def _pick(scanned: list[Scanned], options: PrepareOptions, bad_rows: Path) -> list[array[int]]:
    """The good rows used from each source: all, or with `balance` a random sample of each
    as large as the smallest source (in file order). `ValueError` if a source has no good
    row: balancing would take none from every source."""
    if not options.balance or not scanned:
        return [array("q", range(one.good)) for one in scanned]
    for one in scanned:
        if not one.good:
            raise ValueError(
                f"--balance takes as many rows from each dataset as the smallest has, and {one.source.name} "
                f"has no good row ({one.bad} bad, listed in {bad_rows}): fix its rows, leave it out, or drop --balance"
            )
    size = min(one.good for one in scanned)
    rng = random.Random(options.seed)
    picked = []
    for one in scanned:
        rows = array("q", range(one.good))
        rng.shuffle(rows)
        picked.append(array("q", sorted(rows[:size])))
    return picked


def _order(scanned: list[Scanned], picked: list[array[int]], options: PrepareOptions) -> array[int]:
    """The rows to write, as numbers into the sources laid end to end, shuffled with the seed."""
    bases = _bases(scanned)
    order = array("q")
    for base, rows in zip(bases, picked, strict=True):
        order.extend(base + row for row in rows)
    if options.shuffle:
        random.Random(options.seed).shuffle(order)
    return order


def _bases(scanned: list[Scanned]) -> list[int]:
    bases, total = [], 0
    for one in scanned:
        bases.append(total)
        total += one.good
    return bases


def _held_out(total: int, report: PrepareReport, options: PrepareOptions) -> int:
    """How many rows go to validation (the last ones of the order)."""
    if options.validation_count is not None:
        if options.validation_count > total:
            bad = f" ({report.bad} bad rows are listed in {report.bad_rows})" if report.bad else ""
            raise ValueError(
                f"--validation-count {options.validation_count} is more than the {total} good rows{bad}"
            )
        return options.validation_count
    if options.validation_fraction is not None:
        return round(total * options.validation_fraction)
    return 0


def _write(
    report: PrepareReport, scanned: list[Scanned], order: array[int], held_out: int, *, blended: bool
) -> None:
    bases = _bases(scanned)
    splits = [("train", report.train, len(order) - held_out)]
    if held_out:
        splits.append(("validation", report.validation, held_out))
    else:
        report.validation.unlink(missing_ok=True)
        PrepareReport.metrics_of(report.validation).unlink(missing_ok=True)
    with ExitStack() as stack:
        fds = [os.open(one.source.path, os.O_RDONLY) for one in scanned]
        for fd in fds:
            stack.callback(os.close, fd)
        rows = iter(order)
        for kind, path, count in splits:
            metrics = DatasetMetrics()
            with open(path, "wb") as out:
                for line in _prepared(report, scanned, fds, bases, rows, count, blended):
                    out.write(line + b"\n")
                    metrics.add(msgspec.json.decode(line))
            described = metrics.as_json(kind, kind, str(path))
            PrepareReport.metrics_of(path).write_text(json.dumps(described, indent=4) + "\n")
            if kind == "train":
                report.train_rows = count
            else:
                report.validation_rows = count


def _prepared(
    report: PrepareReport,
    scanned: list[Scanned],
    fds: list[int],
    bases: list[int],
    rows: Iterator[int],
    count: int,
    blended: bool,
) -> Iterator[bytes]:
    """The next `count` rows of `rows`, read back and stamped."""
    for _ in range(count):
        number = next(rows)
        at = bisect_right(bases, number) - 1
        source = scanned[at].source
        line = read_line(fds[at], scanned[at], number - bases[at])
        fields = row_fields(line)
        changed = False
        if fields.get(AGENT_REF, _null) == _null:
            assert source.agent is not None  # validated: a row without agent_ref needs one
            ref = AgentRef(type="responses_api_agents", name=source.agent)
            fields[AGENT_REF] = msgspec.Raw(_encode(ref))
            report.stamped += 1
            changed = True
        if blended and (TASK_INDEX in fields or ROLLOUT_INDEX in fields):
            fields.pop(TASK_INDEX, None)
            fields.pop(ROLLOUT_INDEX, None)
            report.renumbered += 1
            changed = True
        yield _encode(fields) if changed else line
