"""A rollouts JSONL file indexed by byte offsets, for the viewer.

The file is streamed once, line by line, and never held whole: per row the index keeps
where its line starts and ends and the list columns (`_view_rows.LineSummary`), in
compact arrays (about 70 bytes a row), so a 100k-row file costs a few MB whatever its
rollouts weigh. One rollout is read back from disk when it is asked for.

A file that grows while it is viewed (a collection still writing it) is indexed further
on `refresh()`; one that was replaced or shrank is indexed again from the start.
"""

from __future__ import annotations

import math
import os
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymbus.schemas import VIEW_LIMITS, ViewLimits

from ._rows import NotARow, summarize

__all__ = ["FileChanged", "Query", "RolloutIndex", "SkippedLine"]

_NONE = -(2**63)
"""Stands for an absent task or rollout index in the integer arrays."""
DISCRETE_VALUES = 11
"""A histogram with at most this many distinct rewards has one bar per value."""
HISTOGRAM_BINS = 10
"""Otherwise, equal-width bins from the lowest to the highest reward."""


class FileChanged(RuntimeError):
    """The file no longer holds the row where the index put it (it was rewritten)."""


@dataclass(frozen=True)
class SkippedLine:
    line: int
    """1-based line number."""
    reason: str


@dataclass(frozen=True)
class Query:
    """Which rows the list shows. Every field set must hold; rewards bounds are inclusive,
    and a row with no numeric reward fails any reward bound."""

    agent: str | None = None
    """Exactly this agent (`""`: rows without `agent_ref.name`)."""
    failure: str | None = None
    """Exactly this `_ng_failure_class`."""
    outcome: str | None = None
    """`ok`: rows without a failure class; `failed`: rows with one."""
    reward_min: float | None = None
    reward_max: float | None = None


class RolloutIndex:
    """Byte offsets and list columns of every row of one JSONL file."""

    def __init__(self, path: Path, limits: ViewLimits = VIEW_LIMITS) -> None:
        self.path = path
        self.limits = limits
        self._reset()

    def _reset(self) -> None:
        self.starts, self.lengths, self.lines = array("q"), array("q"), array("q")
        self.rewards = array("d")
        self.tasks, self.rollouts = array("q"), array("q")
        self.turns, self.tool_calls = array("l"), array("l")
        self.agent_ids, self.failure_ids = array("l"), array("l")
        self.agents: list[str] = []
        self.failures: list[str] = []
        self._agent_id: dict[str, int] = {}
        self._failure_id: dict[str, int] = {}
        self.skipped: list[SkippedLine] = []
        self.skipped_count = 0
        self._line = 0  # lines read, up to the end of the last whole line
        self._end = 0  # byte offset just after the last newline
        self._tail: str | None = None  # what an unterminated last line added: "row", "skip"
        self._stamp: tuple[int, int, int, int] | None = None
        self._selected: tuple[Any, list[int]] | None = None
        self._histogram: tuple[int, dict[str, Any]] | None = None

    @property
    def rows(self) -> int:
        return len(self.starts)

    def refresh(self) -> bool:
        """Index what changed since the last call; whether anything did."""
        stat = os.stat(self.path)
        stamp = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return False
        previous = self._stamp
        if (
            previous is None
            or previous[:2] != stamp[:2]
            or stat.st_size < self._end
            or (stat.st_size == previous[2] and stat.st_mtime_ns != previous[3])
        ):
            self._reset()
        else:
            self._drop_tail()
        self._stamp = stamp
        self._index_from(self._end)
        return True

    def _drop_tail(self) -> None:
        """Forget the unterminated last line: it may have been a row half written."""
        if self._tail == "row":
            for column in self._columns():
                column.pop()
        elif self._tail == "skip":
            self.skipped_count -= 1
            if self.skipped and self.skipped[-1].line == self._line + 1:
                self.skipped.pop()
        self._tail = None

    def _columns(self) -> tuple[array[Any], ...]:
        return (self.starts, self.lengths, self.lines, self.rewards, self.tasks, self.rollouts,
                self.turns, self.tool_calls, self.agent_ids, self.failure_ids)  # fmt: skip

    def _index_from(self, offset: int) -> None:
        with open(self.path, "rb") as file:
            file.seek(offset)
            for raw in file:  # buffered, one line at a time
                whole = raw.endswith(b"\n")
                self._add(raw, offset, self._line + 1, whole)
                offset += len(raw)
                if whole:
                    self._line += 1
                    self._end = offset

    def _add(self, raw: bytes, start: int, line: int, whole: bool) -> None:
        body = raw.strip()
        if not body:
            return  # a blank line holds no row
        start += len(raw) - len(raw.lstrip())
        tail = None if whole else "row"
        try:
            summary = summarize(body)
        except NotARow as exc:
            reason = str(exc) if whole else f"{exc}; the file ends without a newline there"
            self._skip(line, reason)
            self._tail = None if whole else "skip"
            return
        self._tail = tail
        self.starts.append(start)
        self.lengths.append(len(body))
        self.lines.append(line)
        self.rewards.append(math.nan if summary.reward is None else summary.reward)
        self.tasks.append(_NONE if summary.task is None else summary.task)
        self.rollouts.append(_NONE if summary.rollout is None else summary.rollout)
        self.turns.append(summary.turns)
        self.tool_calls.append(summary.tool_calls)
        self.agent_ids.append(_intern(summary.agent, self.agents, self._agent_id))
        self.failure_ids.append(_intern(summary.failure, self.failures, self._failure_id))

    def _skip(self, line: int, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < self.limits.skipped_listed:
            self.skipped.append(SkippedLine(line, reason))

    def describe(self) -> dict[str, Any]:
        """What the page shows of the whole file: its name, size, agents, failure classes,
        the lines it skipped and the reward histograms."""
        return {
            "name": self.path.name,
            "rows": self.rows,
            "agents": self.agents,
            "failures": self.failures,
            "skipped": [[s.line, s.reason] for s in self.skipped],
            "skipped_count": self.skipped_count,
            "histogram": self.histogram(),
        }

    def summary(self, row: int) -> list[Any]:
        """Row `row`'s list columns: `[row, line, reward, agent, task, rollout, turns,
        tool_calls, failure]`, agent and failure as positions in `agents` and `failures`."""
        reward = self.rewards[row]
        task, rollout = self.tasks[row], self.rollouts[row]
        return [row, self.lines[row], None if math.isnan(reward) else reward, self.agent_ids[row],
                None if task == _NONE else task, None if rollout == _NONE else rollout,
                self.turns[row], self.tool_calls[row], self.failure_ids[row]]  # fmt: skip

    def select(self, query: Query) -> list[int]:
        """The rows `query` matches, in file order (the last answer is kept for paging)."""
        key = (query, self.rows, self._stamp)
        if self._selected is not None and self._selected[0] == key:
            return self._selected[1]
        rows = self._match(query)
        self._selected = (key, rows)
        return rows

    def _match(self, query: Query) -> list[int]:
        rows: range | list[int] = range(self.rows)
        if query.agent is not None:
            agent = self._agent_id.get(query.agent, -1)
            rows = [i for i in rows if self.agent_ids[i] == agent]
        if query.failure is not None:
            failure = self._failure_id.get(query.failure, -1)
            rows = [i for i in rows if self.failure_ids[i] == failure]
        if query.outcome is not None:
            ok = self._failure_id.get("", -1)
            want_ok = query.outcome == "ok"
            rows = [i for i in rows if (self.failure_ids[i] == ok) == want_ok]
        low = -math.inf if query.reward_min is None else query.reward_min
        high = math.inf if query.reward_max is None else query.reward_max
        if query.reward_min is not None or query.reward_max is not None:
            rows = [i for i in rows if low <= self.rewards[i] <= high]  # NaN fails both
        return list(rows)

    def histogram(self) -> dict[str, Any]:
        """Rewards per agent over the whole file: `bins` (`lo`, `hi`, inclusive) and, per
        agent, a count per bin and the rows with no numeric reward."""
        if self._histogram is not None and self._histogram[0] == self.rows:
            return self._histogram[1]
        result = _histogram(self.rewards, self.agent_ids, self.agents)
        self._histogram = (self.rows, result)
        return result

    def read(self, row: int) -> bytes:
        """The JSON of row `row`, read from disk."""
        with open(self.path, "rb") as file:
            file.seek(self.starts[row])
            body = file.read(self.lengths[row] + 1)
        if body[:1] != b"{" or body[-1:] not in (b"}", b"\n", b"\r", b" ", b"\t"):
            raise FileChanged(f"{self.path} changed since it was indexed; reload the page")
        return body[: self.lengths[row]]


def _intern(name: str, names: list[str], ids: dict[str, int]) -> int:
    found = ids.get(name)
    if found is None:
        found = ids[name] = len(names)
        names.append(name)
    return found


def _histogram(rewards: array[float], agent_ids: array[int], agents: list[str]) -> dict[str, Any]:
    values = [r for r in rewards if not math.isnan(r)]
    distinct: set[float] = set()
    for reward in values:
        distinct.add(reward)
        if len(distinct) > DISCRETE_VALUES:
            break
    if len(distinct) <= DISCRETE_VALUES:
        bins = [(v, v) for v in sorted(distinct)]
        position = {v: i for i, (v, _) in enumerate(bins)}

        def bin_of(reward: float) -> int:
            return position[reward]
    else:
        low, high = min(values), max(values)
        width = (high - low) / HISTOGRAM_BINS
        bins = [(low + i * width, low + (i + 1) * width) for i in range(HISTOGRAM_BINS)]

        def bin_of(reward: float) -> int:
            return min(int((reward - low) / width), HISTOGRAM_BINS - 1)

    counts = [[0] * len(bins) for _ in agents]
    missing = [0] * len(agents)
    for reward, agent in zip(rewards, agent_ids, strict=True):
        if math.isnan(reward):
            missing[agent] += 1
        else:
            counts[agent][bin_of(reward)] += 1
    return {
        "bins": [{"lo": lo, "hi": hi} for lo, hi in bins],
        "agents": [
            {"agent": name, "counts": counts[i], "no_reward": missing[i]} for i, name in enumerate(agents)
        ],
    }
