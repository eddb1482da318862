"""Aggregate metrics per agent, as NeMo Gym reports them, in bounded memory.

For every numeric top-level field of a rollout row (and the token counts in
`response.usage`) NeMo Gym reports `mean/<f>`, `max/<f>`, `min/<f>`, `median/<f>` and
`std/<f>` (sample standard deviation); its default key metrics are all the `mean/*`.
Means and deviations here are exact (Welford); the median is exact up to
`RESERVOIR` values per field and estimated from a uniform sample of that size beyond.

An agent whose environment declares `TaskMetrics` (pass@k for `mcqa`, say) also gets
that environment's metrics in `agent_metrics`, its headline metrics as `key_metrics`,
and one `group_level_metrics` entry per task. For those the runner keeps, per rollout,
only the small projection the environment asks for, never the row.

Each entry also has GymBus's own `gymbus` counts: `restarts`, rollouts started over from a
fresh session (each paid its model calls again), and `redelivered`, deliveries of a task
beyond its first (its worker died or stopped): both 0 on a healthy bus.
"""

from __future__ import annotations

import math
import random
import statistics
from array import array
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gymbus.functions import TaskMetrics
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import (
    AGENT_REF,
    DEFAULT_LIMITS,
    RESPONSE,
    REWARD,
    ROLLOUT_INDEX,
    STATS,
    TASK_INDEX,
    AgentRef,
    RolloutStats,
)

__all__ = [
    "AgentMetrics",
    "FieldStats",
    "Metrics",
    "Spread",
    "TaskGroups",
    "agent_of",
    "builtin_task_metrics",
    "numeric_fields",
]

RESERVOIR = DEFAULT_LIMITS.metrics_reservoir
_NUMBER_START = frozenset(b"-0123456789")
_agent_decoder = msgspec.json.Decoder(AgentRef | None)
_stats_decoder = msgspec.json.Decoder(RolloutStats)


def _stats(fields: dict[str, msgspec.Raw]) -> RolloutStats | None:
    try:
        return _stats_decoder.decode(fields[STATS]) if STATS in fields else None
    except msgspec.DecodeError:
        return None


@dataclass
class Spread:
    """Count, mean, extremes and sample standard deviation of a stream of numbers, in
    constant memory (Welford's running variance)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)
        self.low, self.high = min(self.low, value), max(self.high, value)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 0.0


@dataclass
class FieldStats(Spread):
    """A `Spread` that also keeps a uniform sample of `RESERVOIR` values, for the median."""

    sample: array[float] = field(default_factory=lambda: array("d"))  # 8 bytes a value
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def add(self, value: float) -> None:
        super().add(value)
        if len(self.sample) < RESERVOIR:
            self.sample.append(value)
        else:
            slot = self.rng.randrange(self.count)
            if slot < RESERVOIR:
                self.sample[slot] = value

    def describe(self, name: str) -> dict[str, float]:
        return {
            f"mean/{name}": self.mean,
            f"max/{name}": self.high,
            f"min/{name}": self.low,
            f"median/{name}": statistics.median(self.sample),
            f"std/{name}": self.std,
        }


def numeric_fields(fields: dict[str, msgspec.Raw]) -> dict[str, float]:
    """The numeric top-level fields of a row (not `_ng_*` stamps), plus `response.usage` counts."""
    numbers: dict[str, float] = {}
    for name, raw in fields.items():
        data = bytes(raw)
        if data and data[0] in _NUMBER_START and not name.startswith("_ng_"):
            numbers[name] = float(data)
    if RESPONSE in fields:
        numbers.update(_usage_numbers(bytes(fields[RESPONSE])))
    return numbers


class _Usage(msgspec.Struct):
    usage: dict[str, Any] | None = None


_response_usage = msgspec.json.Decoder(_Usage)


def _usage_numbers(response: bytes) -> dict[str, float]:
    try:
        usage = _response_usage.decode(response).usage or {}
    except msgspec.DecodeError:
        return {}
    return {k: float(v) for k, v in usage.items() if isinstance(v, int | float) and not isinstance(v, bool)}


_index_decoder = msgspec.json.Decoder(int)


def _index(fields: dict[str, msgspec.Raw], name: str) -> int:
    """A row's `_ng_task_index` / `_ng_rollout_index`; 0 when absent, as NeMo Gym defaults it."""
    try:
        return _index_decoder.decode(fields[name]) if name in fields else 0
    except msgspec.DecodeError:
        return 0


@dataclass
class TaskGroups:
    """One agent's rollouts as its environment's `TaskMetrics` sees them: a projection per
    rollout, grouped by task."""

    spec: TaskMetrics
    tasks: dict[int, list[tuple[int, Any]]] = field(default_factory=dict)

    def add(self, fields: dict[str, msgspec.Raw]) -> None:
        try:
            projected = self.spec.project(fields)
        except (msgspec.DecodeError, ValueError, TypeError):
            return  # a row the environment cannot read counts in the generic metrics only
        rollouts = self.tasks.setdefault(_index(fields, TASK_INDEX), [])
        rollouts.append((_index(fields, ROLLOUT_INDEX), projected))

    def grouped(self) -> list[tuple[int, list[Any]]]:
        """Each task's projections in rollout order, tasks in index order."""
        return [
            (task, [projected for _, projected in sorted(rollouts, key=lambda pair: pair[0])])
            for task, rollouts in sorted(self.tasks.items())
        ]

    def agent_metrics(self) -> dict[str, Any]:
        return self.spec.compute([rollouts for _, rollouts in self.grouped()]) if self.tasks else {}

    def group_level_metrics(self) -> list[dict[str, Any]]:
        per_task = self.spec.per_task
        if per_task is None:
            return []
        return [
            {TASK_INDEX: task, "num_rollouts": len(rollouts), **per_task(rollouts)}
            for task, rollouts in self.grouped()
        ]


@dataclass
class AgentMetrics:
    fields: dict[str, FieldStats] = field(default_factory=dict)
    rollouts: int = 0
    failures: int = 0
    restarts: int = 0
    redelivered: int = 0
    groups: TaskGroups | None = None

    def count_restarts(self, fields: dict[str, msgspec.Raw]) -> int:
        """Add the row's restarts and redeliveries; returns its restarts."""
        stats = _stats(fields)
        if stats is None:
            return 0
        self.restarts += stats.restarts
        self.redelivered += max(0, stats.delivery - 1)
        return stats.restarts

    def add(self, numbers: dict[str, float]) -> None:
        self.rollouts += 1
        for name, value in numbers.items():
            stats = self.fields.get(name)
            if stats is None:
                stats = self.fields[name] = FieldStats()
            stats.add(value)

    def agent_metrics(self) -> dict[str, Any]:
        described: dict[str, Any] = {}
        for name, stats in sorted(self.fields.items()):
            described.update(stats.describe(name))
        if self.groups is not None:
            described.update(self.groups.agent_metrics())
        return described

    def key_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        spec = self.groups.spec if self.groups is not None else None
        if spec is not None and spec.key_metrics is not None:
            return spec.key_metrics(metrics)
        return {k: v for k, v in metrics.items() if k.startswith("mean/")}


def builtin_task_metrics() -> dict[str, TaskMetrics]:
    """The `TaskMetrics` of every built-in agent whose environment declares them."""
    found = {}
    for name, agent in AGENTS.items():
        spec = ENVIRONMENTS[agent.environment].metrics
        if spec is not None:
            found[name] = spec
    return found


@dataclass
class Metrics:
    """Running metrics of a collection, per agent. `task_metrics` names the agents whose
    environment adds its own metrics (by default, the built-in ones)."""

    agents: dict[str, AgentMetrics] = field(default_factory=dict)
    reward_sum: float = 0.0
    rewarded: int = 0
    restarts: int = 0
    """Rollouts started over, all agents together (see the module docstring)."""
    task_metrics: dict[str, TaskMetrics] = field(default_factory=builtin_task_metrics)

    def _agent(self, agent: str) -> AgentMetrics:
        if agent not in self.agents:
            spec = self.task_metrics.get(agent)
            self.agents[agent] = AgentMetrics(groups=TaskGroups(spec) if spec is not None else None)
        return self.agents[agent]

    def add(self, agent: str, fields: dict[str, msgspec.Raw]) -> None:
        numbers = numeric_fields(fields)
        entry = self._agent(agent)
        entry.add(numbers)
        self.restarts += entry.count_restarts(fields)
        if entry.groups is not None:
            entry.groups.add(fields)
        if REWARD in numbers:
            self.reward_sum += numbers[REWARD]
            self.rewarded += 1

    def add_failure(self, agent: str, fields: dict[str, msgspec.Raw] | None = None) -> None:
        entry = self._agent(agent)
        entry.failures += 1
        if fields is not None:
            self.restarts += entry.count_restarts(fields)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    def aggregate(self) -> list[dict[str, Any]]:
        """NeMo Gym's `_aggregate_metrics.json`: one entry per agent."""
        entries = []
        for name, agent in sorted(self.agents.items()):
            if not name:
                continue  # input rows that named no agent: they are in the failures file
            metrics = agent.agent_metrics()
            entries.append(
                {
                    AGENT_REF: {"name": name},
                    "agent_metrics": metrics,
                    "key_metrics": agent.key_metrics(metrics),
                    "group_level_metrics": agent.groups.group_level_metrics() if agent.groups else [],
                    "gymbus": {"restarts": agent.restarts, "redelivered": agent.redelivered},
                }
            )
        return entries


def agent_of(fields: dict[str, msgspec.Raw]) -> str:
    """The agent name a row's `agent_ref` gives, or `""`."""
    if AGENT_REF not in fields:
        return ""
    try:
        ref = _agent_decoder.decode(fields[AGENT_REF])
    except msgspec.DecodeError:
        return ""
    return ref.name if ref is not None else ""
