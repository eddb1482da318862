"""TRL's asynchronous GRPO over the bus: a rollout worker for `AsyncGRPOTrainer`.

    from peft import LoraConfig
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from gymbus.runner import BusRolloutWorker, tasks_dataset

    dataset = tasks_dataset(["weather.jsonl", "mcqa.jsonl"])
    config = AsyncGRPOConfig(output_dir="out", max_staleness=2, ...)
    worker = BusRolloutWorker(config, dataset)           # points the config at its relay
    trainer = AsyncGRPOTrainer(model="Qwen/...", args=config, train_dataset=dataset,
                               peft_config=LoraConfig(...), rollout_worker=worker)
    trainer.train()

It implements TRL 1.16's `RolloutWorkerProtocol` (`rollout_buffer`, `metrics_queue`,
`start`, `stop`, `update_model_version`, `check_health`), all called from the trainer's
main thread and none of them blocking: the work happens on an event loop of its own.

- **Rollouts.** The dataset's tasks go to the bus ahead of the trainer, each prompt ×
  `num_generations` as one group, routed by `agent_ref` (several environments in one run),
  at most `max_inflight_groups` groups ahead of what the trainer has taken (by default
  `max_staleness` steps' worth, as TRL's own worker). Every request carries the trainer's
  complete sampling parameters (`Sampling`). A complete group is stitched and scored as
  `_groups` says (failed rollouts out of the statistics) into `RolloutSample`s tagged with
  the policy version their model calls used; samples past `max_staleness` are dropped and
  counted, and with `dynamic_sampling` so are groups whose rewards are all equal.
- **Weights.** TRL syncs a PEFT policy as LoRA adapters to `vllm_server_base_url`, which
  the worker points at its relay (`_relay`): each version reaches every vLLM server through
  the bus (`gym-runner sync-adapters` beside each), and the trainer moves to it once they
  hold it. Model calls name the current version per call (`metadata.gymbus_policy`), so
  any number of servers serve the policy. `deliver_adapters=False` is the ablation: the
  servers keep the base model, and the samples count as current.
- **Metrics** (`metrics_queue`, in the trainer's logs): `rollout/staleness_mean|max`,
  `rollout/dropped_stale_total`, `rollout/failed_total`, `rollout/empty_groups_total`,
  `rollout/dropped_uniform_groups_total`, `rollout/redelivered_total` (rollouts whose agent
  worker died: run again by another), `rollout/rollouts_per_s`,
  `rollout/groups_outstanding`, `rollout/buffer_size` and `rollout/reward/<agent>`; each
  sample's `reward` and `rewards/<agent>`.
- **Faults.** A killed agent worker costs a redelivery. An agent, environment or model no
  worker serves stops `start` with its name; every rollout of the last groups failing, or
  none finishing for `heartbeat_stale_after_s`, makes `check_health` stop training with the
  reason. A trainer restarted from a checkpoint with the same `run` and `resume=True` takes
  over the groups its predecessor left open (their results stay on the bus) and continues
  its version numbering; rollouts that predecessor finished count as older than the
  restarted trainer's first version.

TRL and torch are the trainer's dependencies and are imported only when it runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from gymbus.bus import PolicyPublisher, RunClient, connect_bus, nats_url_from_env
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, BusUnavailable, Limits, Timeouts, policy_key

from ._data import TaskIndex
from ._groups import sample_type
from ._loop import LoopThread
from ._sampling import Sampling
from ._stream import RolloutStream, StreamSettings
from ._task_rows import task_for

__all__ = ["BusRolloutWorker"]

log = logging.getLogger("gymbus.trainer")

_EMPTY_GROUPS = 8
"""Groups in a row whose every rollout failed before `check_health` stops training (at
least; `max_inflight_groups` if more)."""


class _SampleBuffer(queue.Queue[Any]):
    """The trainer's rollout buffer; tells `taken(group_id)` of each sample it gives out."""

    def __init__(self, taken: Callable[[int], None]) -> None:
        super().__init__()
        self.taken = taken

    def _get(self) -> Any:
        sample = super()._get()
        self.taken(sample.group_id)
        return sample


class BusRolloutWorker:
    """A rollout worker for TRL's `AsyncGRPOTrainer` on the bus at `nats_url` (default
    `NATS_URL`); see the module docstring. Make it before the trainer: it sets
    `args.vllm_server_base_url` to its relay, which the trainer probes when it is made.

    `dataset` is `tasks_dataset(...)`'s (pass it to the trainer as `train_dataset` too).
    `policy` names the policy (the `--policy` of the servers' `sync-adapters`); `run`
    names the run (a fresh one by default), which `resume=True` continues.
    """

    def __init__(
        self,
        args: Any,
        dataset: Any,
        nats_url: str | None = None,
        *,
        policy: str = "policy",
        run: str | None = None,
        resume: bool = False,
        deliver_adapters: bool = True,
        dynamic_sampling: bool = False,
        max_inflight_groups: int | None = None,
        rollout_timeout: float = DEFAULT_TIMEOUTS.rollout,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        url = nats_url or nats_url_from_env()
        if url is None:
            raise BusUnavailable("no bus to send rollouts to: pass nats_url or set NATS_URL")
        sample_type()  # imported here: on the worker's loop it would stall the bus connection
        self.incarnation = uuid.uuid4().hex[:8]
        self.run_id = run or f"trl-async-{self.incarnation}"
        self.resume = resume
        self.deliver_adapters = deliver_adapters
        self.index = TaskIndex.of_dataset(dataset)
        self.agents = set(dataset["agent"])
        self.sampling = Sampling.of(args)
        self._check_tasks()
        self.settings = StreamSettings(
            group_size=int(args.num_generations),
            max_groups=max_inflight_groups or _inflight_groups(args),
            max_staleness=int(args.max_staleness),
            rollout_timeout=rollout_timeout,
            dynamic_sampling=dynamic_sampling,
            policy=policy_key(policy, self.run_id) if deliver_adapters else None,
            seed=int(getattr(args, "seed", 0) or 0),
            timeouts=timeouts,
        )
        self.timeouts = timeouts
        self.limits = limits
        self.rollout_buffer: queue.Queue[Any] = _SampleBuffer(self._taken)
        self.metrics_queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.trainer_version = 0
        self.error: BaseException | None = None
        self.stream: RolloutStream | None = None
        self.running: Future[None] | None = None
        self.loop = LoopThread("gymbus-rollout-worker")
        self._open_on_bus(url, policy, args)

    def _open_on_bus(self, url: str, policy: str, args: Any) -> None:
        """Connect, open the policy's publisher, and start the relay TRL's adapter sync goes
        to (its URL set on `args`)."""
        self.bus = self.loop.run(connect_bus(url, name="gymbus async trainer", timeouts=self.timeouts))
        from ._relay import AdapterRelay  # aiohttp's web server: loaded only by a trainer that runs one

        key = policy_key(policy, self.run_id)
        self.publisher = self.loop.run(
            PolicyPublisher.open(self.bus, key, self.incarnation, self.timeouts, self.limits)
        )
        self.relay = AdapterRelay(self.publisher, deliver=self.deliver_adapters)
        args.vllm_server_base_url = self.loop.run(self.relay.start())
        log.info("rollout worker for run %s: policy %s, TRL's adapter sync goes to %s",
                 self.run_id, key, args.vllm_server_base_url)  # fmt: skip

    def _check_tasks(self) -> None:
        """Build each task once, so that a bad row stops us here, named."""
        for position, task in enumerate(self.index.tasks):
            task_for(task, self.index.describe(position), position, 0, self.sampling, True)

    # RolloutWorkerProtocol

    def start(self) -> None:
        """Check that every agent of the dataset can run, then start the rollouts."""
        self.loop.run(self._check_served())
        client = self.loop.run(
            RunClient.open(
                self.bus, self.run_id, resume=self.resume, limits=self.limits, timeouts=self.timeouts
            )
        )
        self.stream = RolloutStream(client, self.settings, self.index, self.sampling, _Feed(self))
        if self.resume:
            self.loop.run(self.stream.resume())
        self.running = self.loop.submit(self._run(self.stream))

    def update_model_version(self, model_version: int) -> None:
        """The trainer moved to its version `model_version` (a plain store: it never blocks)."""
        self.trainer_version = model_version

    def check_health(self, stale_after_s: float) -> None:
        """Raise why training cannot go on: the worker failed, the last groups' rollouts all
        failed, or no group finished within `stale_after_s` seconds."""
        if self.error is not None:
            raise RuntimeError(
                f"the rollout worker stopped: {type(self.error).__name__}: {self.error}"
            ) from self.error
        stream = self.stream
        if stream is None:
            return
        tally = stream.tally
        if tally.empty_in_a_row >= max(_EMPTY_GROUPS, self.settings.max_groups):
            counts = ", ".join(f"{count} {name}" for name, count in tally.failures.most_common())
            raise RuntimeError(
                f"every rollout of the last {tally.empty_in_a_row} groups failed ({counts} so far); "
                f"last: {tally.last_failure}"
            )
        idle = time.time() - tally.finished_at
        if idle > stale_after_s:
            raise RuntimeError(
                f"no group of rollouts finished in {idle:.0f} s ({stream.outstanding} outstanding in run "
                f"{self.run_id}): are the agent workers and the policy's servers alive?"
            )

    def stop(self) -> None:
        """Stop the rollouts and leave the bus. A trainer that stopped on an error keeps the
        run and its results on the bus, for a resumed run; otherwise they are deleted."""
        forget = sys.exc_info()[0] is None
        if self.running is not None:
            self.running.cancel()
        self.loop.run(self._close(forget))
        self.loop.stop()
        if not forget:
            log.info("run %s stays on the bus: resume it with BusRolloutWorker(run=%r, resume=True)",
                     self.run_id, self.run_id)  # fmt: skip

    # On the worker's loop

    async def _check_served(self) -> None:
        deadline = time.monotonic() + self.timeouts.worker_start
        missing = await self.bus.unserved(self.agents, self.timeouts.discovery)
        while missing and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            missing = await self.bus.unserved(self.agents, self.timeouts.discovery)
        if missing:
            raise BusUnavailable(
                "the dataset's rollouts cannot run: "
                + "; ".join(missing.values())
                + " (start them with `gym-runner serve` on this bus)"
            )

    async def _run(self, stream: RolloutStream) -> None:
        try:
            await stream.run()
        except Exception as exc:  # noqa: BLE001 - check_health reports it to the trainer
            log.exception("the rollout worker failed")
            self.error = exc

    async def _close(self, forget: bool) -> None:
        if self.stream is not None:
            await self.stream.client.close(forget=forget)
        await self.relay.stop()
        await self.publisher.close(forget=forget)
        await self.bus.close(self.timeouts)

    def _taken(self, group_id: int) -> None:
        stream = self.stream
        if stream is not None:
            self.loop.loop.call_soon_threadsafe(stream.taken, group_id)


class _Feed:
    """TRL's trainer as its rollout stream sees it (`Trainer`): the worker's sample buffer
    and metrics queue, which the trainer reads from its own thread, and its version."""

    def __init__(self, worker: BusRolloutWorker) -> None:
        self.worker = worker

    def version(self) -> int:
        """The trainer's version, in the policy's numbering (continued across restarts)."""
        return self.worker.publisher.base + self.worker.trainer_version

    def deliver(self, samples: list[Any]) -> None:
        base = self.worker.publisher.base
        for sample in samples:
            sample.model_version -= base  # the trainer counts from its own first version
            self.worker.rollout_buffer.put_nowait(sample)

    def report(self, metrics: dict[str, Any]) -> None:
        self.worker.metrics_queue.put_nowait(metrics)

    def buffered(self) -> int:
        return self.worker.rollout_buffer.qsize()


def _inflight_groups(args: Any) -> int:
    """TRL's default bound (`max_staleness` steps of samples, at least one), in groups."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    samples_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    return max(1, math.ceil(max(args.max_staleness, 1) * samples_per_step / args.num_generations))
