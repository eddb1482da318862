"""What `collect` says when it ends, and the exit status scripts read.

The console shows what a person needs: rollouts, failures by class (with the first
message of each), the rate, each agent's mean reward and its environment's own metrics,
rounded. The aggregate-metrics file keeps NeMo Gym's full layout; none of this changes it.

Exit status: 0 every planned rollout is in the rollouts file; 1 the command could not run
or stopped on an error; 2 a usage error; 3 finished, but some rollouts (or input rows) are
failure rows; 4 finished with no rollout at all (every one failed, every row was bad, or
the input has none); 130 / 143 interrupted by SIGINT / SIGTERM (`--resume` finishes).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from .._console import ExitCode, plural
from .._metrics import AgentMetrics

if TYPE_CHECKING:
    from ._collect import CollectResult

__all__ = ["ExitCode", "agent_lines", "exit_code", "failure_lines", "plural", "result_line"]

_PERCENT = re.compile(r"^(pass@|majority@)")  # NeMo Gym gives these in percent
_K_ONE = re.compile(r"@1$|avg-of-1\]$")
_GENERIC = re.compile(r"^(mean|max|min|median|std)/")  # every numeric field's: the file has them
_SHOWN_FAILURES = 8
_MESSAGE_CHARS = 300


def exit_code(result: CollectResult) -> ExitCode:
    """The status of a collection that ran to its end (an interrupted one exits 128 + signal)."""
    if result.planned and result.rollouts == result.planned:
        return ExitCode.OK
    return ExitCode.SOME_FAILED if result.rollouts else ExitCode.NONE_COLLECTED


def result_line(result: CollectResult) -> str:
    """`Collected 15 rollouts of 20 planned in 0.4 s (42 rollouts/s); 5 failures`."""
    collected = plural(result.written, "rollout") if result.written else "no rollouts"
    line = f"Collected {collected} of {result.planned:,} planned"
    rate = result.rate
    if rate is not None and result.written:
        line += f" in {_seconds(result.collecting)} ({_number(rate)} rollouts/s)"
    if result.failed:
        line += f"; {plural(result.failed, 'failure')}"
    if result.skipped:
        line += f"; {result.skipped:,} done by an earlier run"
    if result.metrics.restarts:
        restarts = plural(result.metrics.restarts, "restart")
        line += f"; {restarts} (rollouts started over, model calls paid again)"
    return line


def failure_lines(result: CollectResult) -> list[str]:
    """Each failure class with its count and its first message, most frequent first."""
    tally = result.failures
    lines = []
    for failure_class, count in tally.counts.most_common(_SHOWN_FAILURES):
        message = tally.first.get(failure_class, "")
        if len(message) > _MESSAGE_CHARS:
            message = message[:_MESSAGE_CHARS] + "…"
        lines.append(f"  {failure_class}: {count:,}" + (f" (first: {message})" if message else ""))
    if len(tally.counts) > _SHOWN_FAILURES:
        lines.append(f"  … and {len(tally.counts) - _SHOWN_FAILURES} more classes")
    return lines


def agent_lines(result: CollectResult) -> list[str]:
    """Per agent: rollouts, failures, mean reward, and the environment's own headline metrics."""
    lines = []
    for name, agent in sorted(result.metrics.agents.items()):
        if not name or not (agent.rollouts or agent.failures):
            continue
        line = f"{name}: {plural(agent.rollouts, 'rollout')}"
        if agent.failures:
            line += f", {agent.failures:,} failed"
        if agent.restarts:
            line += f", {agent.restarts:,} restarted"
        if agent.redelivered:
            line += f", {agent.redelivered:,} redelivered"
        reward = agent.fields.get("reward")
        if reward is not None and reward.count:
            line += f", mean reward {reward.mean:.3f}"
        own = _own_metrics(agent)
        lines.append(line + (f"; {own}" if own else ""))
    return lines


def _own_metrics(agent: AgentMetrics) -> str:
    """The environment's key metrics (pass@k, ...) without the generic `mean/*` kind, one
    entry per score and value: metrics that agree are named together (at k = 1, pass@1,
    its average and majority@1 are one number)."""
    if agent.groups is None:
        return ""
    metrics = agent.agent_metrics()
    named: dict[tuple[str, str], list[str]] = {}
    for key, value in agent.key_metrics(metrics).items():
        if _GENERIC.match(key) or not _is_number(value):
            continue
        kind, _, score = key.partition("/")
        shown = f"{value:.1f}%" if _PERCENT.match(kind) else _number(value)
        named.setdefault((score, shown), []).append(kind)
    return ", ".join(f"{score} {_kinds(kinds)} {shown}" for (score, shown), kinds in named.items())


def _kinds(kinds: list[str]) -> str:
    """`pass@1[avg-of-3] = majority@3`; just `pass@1` for k = 1, where all of them are."""
    if all(_K_ONE.search(kind) for kind in kinds):
        return "pass@1"
    return " = ".join(kinds)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 1 else f"{value:,.1f} s"


def _number(value: float) -> str:
    """Whole from 10 up, three significant digits below, at most three decimals: 0.400, 5.25, 56, 1,428."""
    if abs(value) >= 10:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.3f}"
