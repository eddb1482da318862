"""P11: training steps fed by the bus, synchronous against asynchronous, when rollouts take
uneven time: how long a step takes, and how much of it the trainer waits for rollouts.

One environment (`instruction_following`, one model call per rollout) and its agent on a
nats-server, the `vllm` model function against the vLLM-like stub, which answers in
`latency` seconds, except for a `slow_share` of its calls (10%), which take `slow_factor`
(10x) as long. Both trainers take `groups` prompts x `generations` rollouts a step and
stand for the GPU's training step with `train_seconds` of sleep (the rollouts' machines
are not the trainer's), over the same number of steps:

- synchronous: `BusRollouts`, GRPOTrainer's rollout function, gathers each step's batch,
  then the step trains: the step waits for its slowest rollout.
- asynchronous: `BusRolloutWorker`, AsyncGRPOTrainer's rollout worker, called as TRL calls
  it (a version after each step; samples past `max_staleness` dropped at the trainer):
  rollouts run ahead of the trainer, at most `max_staleness` steps of them.

The trainer's wait is the time it spent blocked on rollouts; its first step (the async
worker has nothing generated yet) is shown apart.
"""

from __future__ import annotations

import queue
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench._procs import RUNNER, Fleet
from bench.openai_stub import free_port
from bench.perf import _wait_for_port

ENVIRONMENT = "instruction_following"
AGENT = "instruction_following_simple_agent"
ROWS = Path(__file__).resolve().parent.parent / "examples" / f"{ENVIRONMENT}.jsonl"


@dataclass(frozen=True)
class Setting:
    steps: int = 20
    groups: int = 4
    generations: int = 8
    train_seconds: float = 1.0
    latency: float = 0.2
    slow_share: float = 0.1
    slow_factor: float = 10.0
    max_staleness: int = 2


@dataclass(frozen=True)
class TrainingRun:
    """Seconds of each step, and of each the trainer spent waiting for rollouts."""

    kind: str
    steps: list[float]
    waits: list[float]
    dropped: int = 0

    @property
    def per_step(self) -> float:
        """Seconds per step after the first."""
        return sum(self.steps[1:]) / len(self.steps[1:])

    @property
    def wait_share(self) -> float:
        """The share of the steps after the first the trainer spent waiting."""
        return sum(self.waits[1:]) / sum(self.steps[1:])


def p11_training(setting: Setting = Setting()) -> tuple[TrainingRun, TrainingRun]:
    """The synchronous and the asynchronous run, on the same fleet."""
    port = free_port()
    with Fleet() as fleet:
        fleet.spawn(
            [*_bench("bench.vllm_stub"), "--port", str(port), "--latency", str(setting.latency),
             "--slow-share", str(setting.slow_share), "--slow-factor", str(setting.slow_factor)],
            ready=None,
        )  # fmt: skip
        _wait_for_port(port)
        url = f"http://127.0.0.1:{port}/v1"
        fleet.spawn(
            [
                *RUNNER,
                "serve",
                ENVIRONMENT,
                "vllm",
                "--model-url",
                url,
                "--model",
                "stub",
                "--model-api",
                "vllm",
            ]
        )
        fleet.spawn([*RUNNER, "serve", AGENT, "--concurrency", "512"])
        from gymbus.runner import tasks_dataset

        dataset = tasks_dataset(ROWS)
        return _synchronous(fleet.url, dataset, setting), _asynchronous(fleet.url, dataset, setting)


def _bench(module: str) -> list[str]:
    return [RUNNER[0], "-m", module]


def _args(setting: Setting) -> SimpleNamespace:
    """The trainer settings the rollout paths read (GRPOConfig's and AsyncGRPOConfig's names)."""
    return SimpleNamespace(
        num_generations=setting.generations, per_device_train_batch_size=setting.groups * setting.generations,
        gradient_accumulation_steps=1, max_staleness=setting.max_staleness, temperature=1.0, top_p=1.0,
        max_completion_length=64, seed=0, use_vllm=False, vllm_server_base_url=None,
    )  # fmt: skip


def _synchronous(url: str, dataset: Any, setting: Setting) -> TrainingRun:
    from gymbus.runner import BusRollouts

    trainer = SimpleNamespace(
        args=_args(setting), train_dataset=dataset, eval_dataset=None, model=SimpleNamespace(training=True),
        processing_class=SimpleNamespace(eos_token_id=0), accelerator=None,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )  # fmt: skip
    prompts = list(dataset["prompt"])
    steps, waits = [], []
    with BusRollouts(url, rollout_timeout=600) as rollouts:
        for step in range(setting.steps):
            started = time.monotonic()
            batch = [
                prompts[(step * setting.groups + group) % len(prompts)] for group in range(setting.groups)
            ]
            rollouts([prompt for prompt in batch for _ in range(setting.generations)], trainer)
            waits.append(time.monotonic() - started)
            time.sleep(setting.train_seconds)
            steps.append(time.monotonic() - started)
    return TrainingRun("synchronous", steps, waits)


def _asynchronous(url: str, dataset: Any, setting: Setting) -> TrainingRun:
    from gymbus.runner import BusRolloutWorker

    worker = BusRolloutWorker(_args(setting), dataset, url, deliver_adapters=False, rollout_timeout=600)
    per_step = setting.groups * setting.generations
    steps, waits, dropped, version = [], [], 0, 1
    worker.update_model_version(version)  # TRL's first sync comes before the worker starts
    worker.start()
    try:
        for _ in range(setting.steps):
            started, waited, taken = time.monotonic(), 0.0, 0
            while taken < per_step:
                asked = time.monotonic()
                sample = worker.rollout_buffer.get(timeout=600)
                waited += time.monotonic() - asked
                if version - sample.model_version > setting.max_staleness:
                    dropped += 1  # as TRL drops it
                    continue
                taken += 1
            time.sleep(setting.train_seconds)
            version += 1
            worker.update_model_version(version)
            steps.append(time.monotonic() - started)
            waits.append(waited)
    finally:
        worker.stop()
    _drain(worker.metrics_queue)
    return TrainingRun("asynchronous", steps, waits, dropped)


def _drain(metrics: queue.Queue[Any]) -> None:
    while True:
        try:
            metrics.get_nowait()
        except queue.Empty:
            return
