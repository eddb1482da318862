"""A model learns through the bus: TRL's `AsyncGRPOTrainer` with GymBus's rollout worker,
a reward from an environment on the bus, LoRA adapters delivered through the bus to the
real vLLM server; and with the adapters not delivered, it does not.

The task: `instruction_following` rows asking for the letter `j` at least once (IFEval's
`keywords:letter_frequency`), verified by that environment's worker as every rollout is.
The tiny random model writes a `j` in about 20% of its 16-token answers; a policy that
learns writes one almost always. Every process is real: a nats-server, `gym-runner serve`
workers (the environment and the `vllm` model function; the agent), `gym-runner
sync-adapters` beside the vLLM server (CPU build, `--enable-lora`), and the trainer, a
PEFT LoRA model on this CPU. TRL's two CUDA assumptions are stood in for by
`tests/trl_cpu.py` (this test's only stand-ins; see there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gymbus import bus
from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.runner import BusRolloutWorker, tasks_dataset
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS
from tests.integration.test_trainer import Fleet
from tests.lora import TARGET_MODULES, Syncer
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import MODEL_NAME, VllmServer

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(900)

ENVIRONMENT = "instruction_following"
AGENT = "instruction_following_simple_agent"
PROMPTS = ("what is the weather in paris", "how cold is it in oslo today")
ACK_WAIT = 3.0
"""Seconds before a killed agent worker's task goes to another."""


def letter_rows(path: Path, letter: str = "j") -> Path:
    """The learnable task: one row per prompt, rewarded 1 when the answer has `letter`."""
    with open(path, "w") as out:
        for prompt in PROMPTS:
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
                "instruction_id_list": ["keywords:letter_frequency"],
                "kwargs": [{"letter": letter, "let_frequency": 1, "let_relation": "at least"}],
                "agent_ref": {"type": "responses_api_agents", "name": AGENT},
            }
            out.write(json.dumps(row) + "\n")
    return path


@dataclass
class Bus:
    """A nats-server, the workers of the environment and policy, and the adapters' syncers."""

    nats: bus.EmbeddedServer
    url: str
    fleet: Fleet
    directory: Path
    syncers: list[Syncer] = field(default_factory=list)

    def agents(self, count: int = 1) -> Any:
        options = ServeOptions(
            functions=(AGENT,),
            limits=replace(DEFAULT_LIMITS, agent_concurrency=32),
            timeouts=replace(DEFAULT_TIMEOUTS, ack_wait=ACK_WAIT),
        )
        return self.fleet.start(options, [AGENT], count)

    def sync(self, server: VllmServer) -> Syncer:
        """A `gym-runner sync-adapters` beside `server`."""
        number = len(self.syncers)
        syncer = Syncer(self.url, server.url, self.directory / f"adapters-{number}",
                        self.directory / f"syncer-{number}.log")  # fmt: skip
        self.syncers.append(syncer)
        return syncer

    def stop(self) -> None:
        for syncer in self.syncers:
            syncer.stop()
        self.fleet.stop()
        self.nats.stop()


def start_bus(directory: Path, servers: list[VllmServer]) -> Bus:
    """The bus, its workers (the policy on `servers`), and a syncer beside each server."""
    nats = bus.EmbeddedServer()
    url = nats.start()
    made = Bus(nats, url, Fleet(url, directory / "workers.log"), directory)
    policy = ModelOptions(base_url=",".join(server.url for server in servers), model=MODEL_NAME, api="vllm")
    try:
        made.fleet.start(ServeOptions(functions=(ENVIRONMENT, "vllm"), model=policy), [ENVIRONMENT, "policy"])
        for server in servers:
            made.sync(server)
    except BaseException:
        made.stop()
        raise
    return made


@pytest.fixture(scope="module")
def one_server(lora_vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bus]:
    made = start_bus(tmp_path_factory.mktemp("async"), [lora_vllm_server])
    try:
        made.agents(1)
        yield made
    finally:
        made.stop()


@dataclass
class Run:
    """One training run's per-step logs, and the worker's counts."""

    rows: list[dict[str, Any]]
    seconds: float

    def series(self, key: str) -> list[float]:
        return [row[key] for row in self.rows if key in row]

    @property
    def rewards(self) -> list[float]:
        return self.series("reward")

    def total(self, key: str) -> float:
        return sum(value for value in self.series(key) if value == value)


def train(
    made: Bus, directory: Path, *, deliver: bool = True, steps: int = 60, seed: int = 0, **config: Any
) -> Run:
    """Train the tiny model's LoRA adapter with rollouts from the bus; the logged rows."""
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from tests import trl_cpu

    trl_cpu.install()
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # two cores: one for the trainer, the rest for the rollouts
    dataset = tasks_dataset(letter_rows(directory / "letters.jsonl"))
    settings: dict[str, Any] = {
        "output_dir": str(directory / "out"),
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "learning_rate": 1e-2,
        "max_steps": steps,
        "per_device_train_batch_size": 16,  # two groups of eight
        "gradient_accumulation_steps": 1,
        "token_budget": 0,  # exactly 16 samples a step
        "num_generations": 8,
        "max_completion_length": 16,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_staleness": 2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": seed,
        "heartbeat_stale_after_s": 120,
        "disable_tqdm": True,
        **config,
    }
    args = AsyncGRPOConfig(**settings)
    worker = BusRolloutWorker(args, dataset, made.url, deliver_adapters=deliver)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=TARGET_MODULES)
    model = str(tiny_model_dir())
    trainer = AsyncGRPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=lora,
        rollout_worker=worker,
    )
    assert trainer._lora_sync  # TRL syncs adapters only, through the relay
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # a dict per step on stdout
    started = time.monotonic()
    trainer.train()
    rows = [row for row in trainer.state.log_history if "reward" in row]
    return Run(rows, time.monotonic() - started)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_the_policy_learns_through_the_bus_and_stays_put_without_its_adapters(
    one_server: Bus, tmp_path: Path
) -> None:
    synced = train(one_server, tmp_path / "synced")
    unsynced = train(one_server, tmp_path / "unsynced", deliver=False)
    for name, run in (("synced", synced), ("unsynced", unsynced)):
        rewards = run.rewards
        print(
            f"{name}: {len(rewards)} steps in {run.seconds:.0f} s; reward by step "
            f"{[round(value, 2) for value in rewards]}; first 5 {mean(rewards[:5]):.3f}, last 5 "
            f"{mean(rewards[-5:]):.3f}; staleness {mean(run.series('sample/staleness_mean')):.2f}; "
            f"dropped stale {run.total('sample/dropped_stale_total'):.0f} (trainer) + "
            f"{run.total('rollout/dropped_stale_total'):.0f} (worker); failed {run.total('rollout/failed_total'):.0f}; "
            f"trainer waited {mean(run.series('perf/rollout_wait_s')):.3f} s of "
            f"{mean(run.series('perf/step_s')):.3f} s a step"
        )
    assert len(synced.rewards) == len(unsynced.rewards) == 60
    assert mean(synced.rewards[-5:]) - mean(synced.rewards[:5]) >= 0.3
    assert abs(mean(unsynced.rewards[-5:]) - mean(unsynced.rewards[:5])) <= 0.15
    assert synced.total("rollout/failed_total") == unsynced.total("rollout/failed_total") == 0
