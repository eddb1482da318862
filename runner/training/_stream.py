"""The rollout stream of an asynchronous run: groups admitted to the bus ahead of the
trainer, their results gathered as they come, each complete group scored into samples.

One run of the task queue (`bus.RunClient`) carries every group of a training run: group
`g`'s rollouts are tasks `g * G .. g * G + G - 1` (`G` = `num_generations`). A group counts
as outstanding from its admission until the trainer has taken all its samples (or it
yielded none), and at most `max_groups` are outstanding: that bounds how far generation
runs ahead of training, so how stale samples get. A killed agent worker costs a
redelivery (the queue's); how else a rollout ends (JetStream gave up on its task, its
deadline passed) is the run's `bus.RunBook`'s, and becomes a failed rollout of its group.

Progress is kept on the bus (`RunClient.save_progress`): the next group, and which groups
are finished. A trainer restarted from a checkpoint that resumes the run finishes the
groups its predecessor left open with the results already on the stream (and the tasks
still queued) instead of running them again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from gymbus.bus import RunBook, RunClient
from gymbus.schemas import TASK_INDEX, Timeouts

from ._data import TaskIndex
from ._groups import GroupOutcome, Member, read_member, score_group
from ._sampling import Sampling
from ._task_rows import task_for

__all__ = ["Group", "Progress", "RolloutStream", "StreamSettings", "Trainer"]

log = logging.getLogger("gymbus.trainer")


class Progress(msgspec.Struct, kw_only=True):
    """Where a run's groups are: every group below `next_group` was admitted; those below
    `finished_below`, and those in `finished`, are done."""

    next_group: int = 0
    finished_below: int = 0
    finished: list[int] = []


class _Index(msgspec.Struct):
    task_index: int | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name=TASK_INDEX)


@dataclass
class Group:
    """One prompt's rollouts in flight. `position` is its dataset row (`None` for a group a
    resumed run took over, until its first result says)."""

    id: int
    position: int | None
    agent: str
    deadline: float
    rows: list[bytes | None]
    waiting: int
    left: int = 0
    """Samples still in the trainer's buffer."""


@dataclass(frozen=True)
class StreamSettings:
    """How a stream runs (the worker fills it from the trainer's config)."""

    group_size: int
    max_groups: int
    max_staleness: int
    rollout_timeout: float
    dynamic_sampling: bool
    policy: str | None
    """The policy the tasks' model calls name (`None`: adapters not delivered)."""
    seed: int
    timeouts: Timeouts


@dataclass
class Tally:
    """Counts since the trainer last took metrics."""

    rollouts: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    empty_in_a_row: int = 0
    last_failure: str = ""
    finished_at: float = field(default_factory=time.time)


class Trainer(Protocol):
    """The trainer a stream feeds, as the stream sees it: samples go out one way
    (`deliver`), metrics too (`report`); the stream reads the trainer's policy `version`
    and how many samples wait in its buffer (`buffered`). A sample the trainer takes comes
    back as `RolloutStream.taken`."""

    def version(self) -> int: ...

    def deliver(self, samples: list[Any]) -> None: ...

    def report(self, metrics: dict[str, Any]) -> None: ...

    def buffered(self) -> int: ...


class RolloutStream:
    """Admits the dataset's (`index`) prompts as groups, gathers and scores them, and feeds
    their samples and metrics to `trainer`."""

    def __init__(
        self,
        client: RunClient,
        settings: StreamSettings,
        index: TaskIndex,
        sampling: Sampling,
        trainer: Trainer,
    ) -> None:
        self.client = client
        self.settings = settings
        self.index = index
        self.sampling = sampling
        self.trainer = trainer
        self.groups: dict[int, Group] = {}
        """Groups whose rollouts are not all in."""
        self.groups_taken: dict[int, Group] = {}
        """Groups whose samples are in the trainer's buffer."""
        self.outstanding = 0
        self.room = asyncio.Event()
        self.progress = Progress()
        self.tally = Tally()
        self.taken_over: set[int] = set()
        """Groups an earlier trainer of the run left open (`resume`)."""
        self.finished_taken_over = 0
        """Of those, the groups finished here."""
        self.order = _positions(len(index.tasks), settings.seed)
        self.book = RunBook(settings.timeouts.result_grace)
        """The rollouts in flight, and how each ends."""

    async def resume(self) -> None:
        """Take over the groups an earlier trainer of this run left open."""
        saved = await self.client.progress()
        if saved is None:
            return
        self.progress = msgspec.json.decode(saved, type=Progress)
        done = set(self.progress.finished)
        deadline = time.time() + self.settings.rollout_timeout
        size = self.settings.group_size
        for group_id in range(self.progress.finished_below, self.progress.next_group):
            if group_id not in done:
                self.groups[group_id] = Group(group_id, None, "", deadline, [None] * size, size)
                for seq in range(group_id * size, group_id * size + size):
                    self.book.submitted(seq, deadline)
                self.outstanding += 1
                self.taken_over.add(group_id)
        log.info("resumed run %s: %d group(s) left open take their results from the stream",
                 self.client.run_id, len(self.groups))  # fmt: skip

    async def run(self) -> None:
        await self.client.watch_given_up(self._given_up)
        await asyncio.gather(self._admit(), self._read(), self._watch_deadlines())

    # Admitting

    async def _admit(self) -> None:
        size = self.settings.group_size
        while True:
            while self.outstanding >= self.settings.max_groups:
                self.room.clear()
                await self.room.wait()
            group_id = self.progress.next_group
            position = next(self.order)
            deadline = time.time() + self.settings.rollout_timeout
            bodies = [
                task_for(self.index.tasks[position], self.index.describe(position), position, repeat, self.sampling, True,
                         self.settings.policy)
                for repeat in range(size)
            ]  # fmt: skip
            group = Group(group_id, position, bodies[0].agent, deadline, [None] * size, size)
            self.groups[group_id] = group
            self.outstanding += 1
            self.progress.next_group += 1
            await self._save()  # before the tasks: a resumed run never reuses their numbers
            for repeat, task in enumerate(bodies):
                self.book.submitted(group_id * size + repeat, deadline)
                await self.client.submit(task.agent, task.body, group_id * size + repeat, 0, deadline)
            await self.client.check_submitted()

    # Gathering

    async def _read(self) -> None:
        async for results in self.client.results():
            for result in results:
                if self.book.settle(result.seq) is not None:
                    self._settle(result.seq, result.body)
            await self.client.ack(results)

    def _given_up(self, seq: int, deliveries: int) -> None:
        row = self.book.given_up(seq, deliveries)
        if row is not None:
            self._settle(seq, row)

    async def _watch_deadlines(self) -> None:
        """Each second: fail the rollouts past their deadline, and report the rates."""
        counted, since = self.tally.rollouts, time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            self.trainer.report({
                "rollout/rollouts_per_s": (float(self.tally.rollouts - counted), time.monotonic() - since),
                "rollout/groups_outstanding": float(self.outstanding),
                "rollout/buffer_size": float(self.trainer.buffered()),
            })  # fmt: skip
            counted, since = self.tally.rollouts, time.monotonic()
            for seq, row in self.book.expired():
                self._settle(seq, row)

    def _settle(self, seq: int, row: bytes) -> None:
        size = self.settings.group_size
        group = self.groups.get(seq // size)
        if group is None or seq < 0 or group.rows[seq % size] is not None:
            return  # a finished group's, an unknown run's, or a result already in
        group.rows[seq % size] = row
        group.waiting -= 1
        if group.position is None:
            group.position = _position_of(row)
        if group.waiting == 0:
            self._finish(group)

    # Scoring

    def _finish(self, group: Group) -> None:
        del self.groups[group.id]
        self.finished_taken_over += group.id in self.taken_over
        required = self.settings.policy is not None
        members = [read_member(row or b"{}", group.agent, required) for row in group.rows]
        prompt = self.index.prompts[group.position] if group.position is not None else []
        outcome = score_group(
            members,
            group.id,
            prompt,
            self.trainer.version(),
            self.settings.max_staleness,
            self.settings.dynamic_sampling,
        )
        self._count(members, outcome)
        if outcome.samples:
            group.left = len(outcome.samples)
            self.groups_taken[group.id] = group
            self.trainer.deliver(outcome.samples)
        else:
            self._release()
        asyncio.get_running_loop().create_task(self._finished(group.id))

    def taken(self, group_id: int) -> None:
        """The trainer took one sample of group `group_id` from its buffer."""
        group = self.groups_taken.get(group_id)
        if group is None:
            return
        group.left -= 1
        if group.left == 0:
            del self.groups_taken[group_id]
            self._release()

    def _release(self) -> None:
        self.outstanding -= 1
        self.room.set()

    async def _finished(self, group_id: int) -> None:
        progress = self.progress
        progress.finished.append(group_id)
        done = set(progress.finished)
        while progress.finished_below in done:
            done.discard(progress.finished_below)
            progress.finished_below += 1
        progress.finished = sorted(done)
        await self._save()

    async def _save(self) -> None:
        if not await self.client.save_progress(msgspec.json.encode(self.progress)):
            # Only a resumed run reads it; the rollouts go on.
            log.warning("could not save run %s's progress on the bus this time", self.client.run_id)

    def _count(self, members: list[Member], outcome: GroupOutcome) -> None:
        tally = self.tally
        tally.rollouts += len(members)
        tally.failures.update(outcome.failures)
        tally.finished_at = time.time()
        if outcome.rewards:
            tally.empty_in_a_row = 0
        else:
            tally.empty_in_a_row += 1
            tally.last_failure = outcome.first_failure
        if outcome.failures:
            log.warning("%d of %d rollouts of a group failed; first: %s", sum(outcome.failures.values()),
                        len(members), outcome.first_failure)  # fmt: skip
        metrics: dict[str, Any] = {
            "rollout/failed_total": float(sum(outcome.failures.values())),
            "rollout/dropped_stale_total": float(outcome.stale),
            "rollout/dropped_uniform_groups_total": float(outcome.uniform),
            "rollout/empty_groups_total": float(not outcome.rewards),
            "rollout/redelivered_total": float(sum(member.redelivered for member in members)),
        }
        if outcome.staleness:
            metrics["rollout/staleness_mean"] = sum(outcome.staleness) / len(outcome.staleness)
            metrics["rollout/staleness_max"] = float(max(outcome.staleness))
        agents = {member.agent for member in members if member.failure is None}
        for agent in agents:
            rewards = [
                member.reward for member in members if member.failure is None and member.agent == agent
            ]
            metrics[f"rollout/reward/{agent}"] = sum(rewards) / len(rewards)
        self.trainer.report(metrics)


def _positions(count: int, seed: int) -> Iterator[int]:
    """Dataset rows in a fresh random order each pass (seeded: a run repeats its order)."""
    rng = random.Random(seed)
    while True:
        order = list(range(count))
        rng.shuffle(order)
        yield from order


def _position_of(row: bytes) -> int | None:
    try:
        index = msgspec.json.decode(row, type=_Index).task_index
    except msgspec.DecodeError:
        return None
    return index if isinstance(index, int) else None
