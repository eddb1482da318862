"""The rollouts an input file asks for, numbered exactly as NeMo Gym numbers them.

`_ng_task_index`: a row's own value if it has one; otherwise identical lines share one
index and distinct lines get 0, 1, 2, ... in order of first appearance.
`_ng_rollout_index`: 0..k-1 for the k repeats of a row, which come consecutively
(abc → aabbcc), counting on where an earlier identical line left off.

The file is read twice and never held in memory: the first pass validates rows and
finds lines that may repeat (a Bloom filter of a fixed 2 MB, plus an exact set of the
few candidates), the second stamps and yields rollouts. Each rollout gets `seq`, its
position in this deterministic order, which the runner uses to account for it.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gymbus.schemas import AGENT_REF, ROLLOUT_INDEX, TASK_INDEX, AgentRef, InputError, row_fields

from .._input import check_agent, check_row, read_lines

__all__ = ["Asked", "BadRow", "Plan", "PlanChanged", "PlannedRollout"]

_encode = msgspec.json.Encoder().encode
_int_decoder = msgspec.json.Decoder(int)
_BLOOM_BITS = 1 << 24


@dataclass(frozen=True)
class PlannedRollout:
    """One rollout to run: `body` is the stamped row sent to the agent."""

    seq: int
    line: int
    task_index: int
    rollout_index: int
    agent: str
    body: bytes


@dataclass(frozen=True)
class BadRow:
    """An input line that cannot run; it becomes one failure row."""

    seq: int
    line: int
    error: InputError


class PlanChanged(ValueError):
    """`--resume` was asked of an output that an earlier run planned differently."""


class Asked(msgspec.Struct, forbid_unknown_fields=False):
    """What decides a run's rollouts and their numbering, kept beside the output
    (`<stem>_plan.json`): a `--resume` that asks otherwise would mix two plans' rows."""

    input: str
    """The input's absolute path, or what names a pipe (`<stdin>`)."""
    num_repeats: int
    limit: int | None
    agent: str | None
    run: str = msgspec.field(default_factory=lambda: "r" + secrets.token_hex(8))
    """The run's id on the bus, new for each fresh run: a fresh run reusing an earlier one's
    would repeat its task message ids, which JetStream drops as duplicates for a while.
    `--resume` takes the earlier run's, to find the results it left on the bus."""

    @classmethod
    def of(cls, input_name: str, num_repeats: int, limit: int | None, agent: str | None) -> Asked:
        path = Path(input_name)
        return cls(str(path.resolve()) if path.is_file() else input_name, num_repeats, limit, agent)

    def encoded(self) -> bytes:
        return msgspec.json.encode(self) + b"\n"

    def resuming(self, path: Path, output: Path) -> Asked:
        """The run that wrote `path`, which this one resumes: `PlanChanged`, naming each
        difference, unless it asked the same. Itself if that run left no record."""
        try:
            earlier = msgspec.json.decode(path.read_bytes(), type=Asked)
        except (FileNotFoundError, msgspec.DecodeError):
            return self
        changed = [
            f"{flag} {_shown(old)}, not {_shown(new)}"
            for flag, old, new in (
                ("-i", earlier.input, self.input),
                ("--num-repeats", earlier.num_repeats, self.num_repeats),
                ("--limit", earlier.limit, self.limit),
                ("--agent", earlier.agent, self.agent),
            )
            if old != new
        ]
        if changed:
            raise PlanChanged(
                f"--resume: {output} was collected with {'; '.join(changed)}, and its rollouts are numbered by "
                "that plan: resume with the earlier arguments, or collect into another --output "
                "(or without --resume, which starts this one afresh)"
            )
        return earlier


def _shown(value: object) -> str:
    return "(none)" if value is None else str(value)


class _MaybeRepeated:
    """Which keys may occur more than once: a Bloom filter and the exact candidates."""

    def __init__(self) -> None:
        self.bits = bytearray(_BLOOM_BITS // 8)
        self.candidates: set[int] = set()

    def _positions(self, key: int) -> tuple[int, int, int]:
        h1, h2 = key & 0xFFFFFFFF, (key >> 32) | 1
        return tuple((h1 + i * h2) % _BLOOM_BITS for i in range(3))  # type: ignore[return-value]

    def add(self, key: int) -> None:
        positions = self._positions(key)
        if all(self.bits[p >> 3] & (1 << (p & 7)) for p in positions):
            self.candidates.add(key)
        for p in positions:
            self.bits[p >> 3] |= 1 << (p & 7)


@dataclass
class Plan:
    """What `collect` will run; build it with `await Plan.scan(...)`."""

    path: Path
    limit: int | None
    num_repeats: int
    default_agent: str | None
    name: str = ""
    """What messages call the input (its path, or `<stdin>`)."""
    total: int = 0
    """Rollouts planned, counting each bad row as one."""
    agents: Counter[str] = field(default_factory=Counter)
    """Rollouts per agent name."""
    bad_lines: set[int] = field(default_factory=set)
    unnamed: int = 0
    """Rows that name no agent while no `--agent` was given (each also a bad line)."""
    first_unnamed: int | None = None
    """The line of the first of them."""
    _repeats: _MaybeRepeated = field(default_factory=_MaybeRepeated)

    @classmethod
    async def scan(
        cls,
        path: Path,
        *,
        limit: int | None = None,
        num_repeats: int = 1,
        default_agent: str | None = None,
        name: str | None = None,
    ) -> Plan:
        """First pass: validate every row and count what will run. `name` is what messages
        call the input (its path by default)."""
        plan = cls(path, limit, num_repeats, default_agent, name=name or str(path))
        async for number, line in read_lines(path, limit):
            try:
                row = check_row(line, plan.name, number)
                plan._count_unnamed(row.agent, number)
                agent = plan._agent_of(row.agent, number)
            except InputError:
                plan.bad_lines.add(number)
                plan.total += 1
                continue
            plan._repeats.add(
                hash(
                    ("task", _int_decoder.decode(row.fields[TASK_INDEX]))
                    if TASK_INDEX in row.fields
                    else line
                )
            )
            plan.agents[agent] += num_repeats
            plan.total += num_repeats
        return plan

    def _count_unnamed(self, named: str | None, number: int) -> None:
        if named is None and self.default_agent is None:
            self.unnamed += 1
            self.first_unnamed = self.first_unnamed or number

    def _agent_of(self, named: str | None, number: int) -> str:
        return check_agent(named, self.default_agent, self.name, number)

    async def rollouts(self) -> AsyncIterator[PlannedRollout | BadRow]:
        """Second pass: every planned rollout (and bad row), in `seq` order."""
        seq = 0
        next_task = 0
        seen: dict[object, list[int]] = {}  # repeated key -> [task index, next rollout index]
        async for number, line in read_lines(self.path, self.limit):
            if number in self.bad_lines:
                yield BadRow(seq=seq, line=number, error=self._error_of(line, number))
                seq += 1
                continue
            fields = row_fields(line)
            own = _int_decoder.decode(fields[TASK_INDEX]) if TASK_INDEX in fields else None
            key: object = ("task", own) if own is not None else line
            if hash(key) in self._repeats.candidates:
                entry = seen.get(key)
                if entry is None:
                    entry = seen[key] = [own if own is not None else next_task, 0]
                    next_task += own is None
                task, first = entry
                entry[1] += self.num_repeats
            else:
                task, first = (own, 0) if own is not None else (next_task, 0)
                next_task += own is None
            agent = self._stamp_agent(fields)
            for k in range(self.num_repeats):
                yield PlannedRollout(
                    seq, number, task, first + k, agent, self._stamped(fields, task, first + k)
                )
                seq += 1

    def _error_of(self, line: bytes, number: int) -> InputError:
        try:
            row = check_row(line, self.name, number)
            self._agent_of(row.agent, number)
        except InputError as exc:
            return exc
        raise AssertionError(f"line {number} was invalid in the first pass only")

    def _stamp_agent(self, fields: dict[str, msgspec.Raw]) -> str:
        ref = msgspec.json.decode(fields[AGENT_REF], type=AgentRef | None) if AGENT_REF in fields else None
        if ref is not None:
            return ref.name
        assert self.default_agent is not None
        fields[AGENT_REF] = msgspec.Raw(
            _encode(AgentRef(type="responses_api_agents", name=self.default_agent))
        )
        return self.default_agent

    @staticmethod
    def _stamped(fields: dict[str, msgspec.Raw], task: int, rollout: int) -> bytes:
        fields[TASK_INDEX] = msgspec.Raw(b"%d" % task)
        fields[ROLLOUT_INDEX] = msgspec.Raw(b"%d" % rollout)
        return _encode(fields)
