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
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, BusUnavailable
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
    servers: list[VllmServer]
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
    made = Bus(nats, url, Fleet(url, directory / "workers.log"), directory, servers)
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
    worker: BusRolloutWorker

    def series(self, key: str) -> list[float]:
        return [row[key] for row in self.rows if key in row]

    @property
    def rewards(self) -> list[float]:
        return self.series("reward")

    def total(self, key: str) -> float:
        return sum(value for value in self.series(key) if value == value)


def train(
    made: Bus,
    directory: Path,
    *,
    deliver: bool = True,
    steps: int = 60,
    seed: int = 0,
    callbacks: tuple[Any, ...] = (),
    worker_options: dict[str, Any] | None = None,
    rows: Path | None = None,
    model_dir: Path | None = None,
    worker_type: type[BusRolloutWorker] = BusRolloutWorker,
    **config: Any,
) -> Run:
    """Train a LoRA adapter of `model_dir` (the tiny model) on `rows` (the letter task) with
    rollouts from the bus; the logged rows."""
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from tests import trl_cpu

    trl_cpu.install()
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # two cores: one for the trainer, the rest for the rollouts
    dataset = tasks_dataset(rows or letter_rows(directory / "letters.jsonl"))
    settings: dict[str, Any] = {
        "output_dir": str(directory / "out"),
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "learning_rate": 1e-2,
        "max_steps": steps,
        # Four groups of eight a step: the mean reward of 5 steps is then of 160 rollouts, whose
        # noise (a standard deviation of about 0.035 at the base model's rate) leaves the
        # ablation's 0.15 bound over four standard deviations of two such means apart.
        "per_device_train_batch_size": 32,
        "gradient_accumulation_steps": 1,
        "token_budget": 0,  # exactly 32 samples a step
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
    worker = worker_type(args, dataset, made.url, deliver_adapters=deliver, **(worker_options or {}))
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=TARGET_MODULES)
    model = str(model_dir or tiny_model_dir())
    trainer = AsyncGRPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=lora,
        rollout_worker=worker,
        callbacks=list(callbacks),
    )
    assert trainer._lora_sync  # TRL syncs adapters only, through the relay
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # a dict per step on stdout
    started = time.monotonic()
    trainer.train()
    rows = [row for row in trainer.state.log_history if "reward" in row]
    return Run(rows, time.monotonic() - started, worker)


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


class Steps:
    """A trainer callback: after each step, `each(step)`, which may stop training by
    returning True; and `slow` seconds of sleep, a slower trainer."""

    def __init__(self, each: Any = None, slow: float = 0.0) -> None:
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if outer.slow:
                    time.sleep(outer.slow)
                if outer.each is not None and outer.each(state.global_step):
                    control.should_training_stop = True

        self.each = each
        self.slow = slow
        self.callback = Callback()


def test_a_killed_agent_worker_loses_no_group_and_samples_past_max_staleness_are_dropped(
    one_server: Bus, tmp_path: Path
) -> None:
    import threading

    from tests.integration.test_trainer import kill_when_busy, queued_tasks, wait_idle

    # The earlier tests' trainers withdrew their queued tasks; the rollouts their workers
    # were running must end too, or the kill could land on one of those.
    wait_idle(one_server.url, AGENT)
    victim = one_server.agents(1)  # beside the fixture's worker; both hold up to 32 rollouts
    killed: list[float] = []
    threading.Thread(
        target=lambda: killed.append(kill_when_busy(one_server.url, AGENT, victim.children[0].pid, busy=32)),
        daemon=True,
    ).start()
    # Stale on purpose: no version behind allowed, six groups (three steps) admitted ahead,
    # and a trainer slowed to let them wait.
    run = train(
        one_server, tmp_path, steps=30, max_staleness=0, callbacks=(Steps(slow=0.2).callback,),
        worker_options={"max_inflight_groups": 6},
    )  # fmt: skip
    left = queued_tasks(one_server.url, AGENT)  # six groups were admitted ahead; the run withdrew them
    victim.children[0].wait(5)
    print(
        f"killed an agent worker at {killed[0]:.1f} s; {len(run.rows)} steps; redelivered "
        f"{run.total('rollout/redelivered_total'):.0f}; stale samples dropped by the worker "
        f"{run.total('rollout/dropped_stale_total'):.0f}, by the trainer {run.total('sample/dropped_stale_total'):.0f}; "
        f"failed {run.total('rollout/failed_total'):.0f}"
    )
    assert killed and victim.children[0].returncode == -9
    assert len(run.rows) == 30
    assert run.total("rollout/redelivered_total") >= 1  # the killed worker's rollouts ran again elsewhere
    assert left == 0
    assert run.total("rollout/failed_total") == run.total("rollout/empty_groups_total") == 0  # no group lost
    assert run.total("rollout/dropped_stale_total") >= 1 and run.total("sample/dropped_stale_total") >= 1
    assert max(run.series("sample/staleness_max")) <= 0  # nothing staler than max_staleness was trained on


def test_a_dataset_whose_agent_or_environment_nobody_serves_stops_the_start_naming_it(
    one_server: Bus, tmp_path: Path
) -> None:
    from trl.experimental.async_grpo import AsyncGRPOConfig

    weather = "example_single_tool_call_simple_agent"
    rows = tmp_path / "weather.jsonl"
    rows.write_text(json.dumps({"responses_create_params": {"input": "weather in Oslo?"}}) + "\n")
    dataset = tasks_dataset([letter_rows(tmp_path / "letters.jsonl"), (rows, weather)])
    args = AsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=2,
                           per_device_train_batch_size=4)  # fmt: skip
    quick = replace(DEFAULT_TIMEOUTS, worker_start=1.0)
    errors = []
    for serve_agent in (False, True):
        if serve_agent:  # its agent, but not its environment
            one_server.fleet.start(ServeOptions(functions=(weather,)), [weather])
        worker = BusRolloutWorker(args, dataset, one_server.url, timeouts=quick)
        started = time.monotonic()
        with pytest.raises(BusUnavailable) as refused:
            worker.start()
        errors.append((str(refused.value), time.monotonic() - started))
        worker.stop()
    for message, took in errors:
        print(f"after {took:.1f} s: {message}")
        assert took < 10
    assert f"no worker serves agent {weather}" in errors[0][0]
    assert f"agent {weather}'s environment example_single_tool_call has no worker" in errors[1][0]
    assert AGENT not in errors[0][0] + errors[1][0]  # the served one is fine


def test_the_async_example_trains_a_few_steps_on_the_seeds_blend(one_server: Bus, tmp_path: Path) -> None:
    """`examples/trl/train_async.py` as written, on its tiny config (weather and multi-turn
    rows), with the stand-ins for TRL's CUDA assumptions loaded at the process's start-up
    (`tests/cpu_site`)."""
    import os
    import subprocess
    import sys

    from tests.conftest import WEATHER, WEATHER_AGENT

    repo = Path(__file__).resolve().parents[2]
    one_server.fleet.start(
        ServeOptions(functions=(WEATHER, "example_multi_turn")), [WEATHER, "example_multi_turn"]
    )
    one_server.fleet.start(
        ServeOptions(functions=("offline",), served_model="user_simulator"), ["user_simulator"]
    )
    one_server.fleet.start(
        ServeOptions(functions=(WEATHER_AGENT, "example_multi_turn_agent")),
        [WEATHER_AGENT, "example_multi_turn_agent"],
    )
    command = [
        sys.executable, str(repo / "examples" / "trl" / "train_async.py"), "--config",
        str(repo / "examples" / "trl" / "tiny_async.yaml"), "--model", str(tiny_model_dir()),
        "--output-dir", str(tmp_path / "out"),
    ]  # fmt: skip
    site = f"{repo / 'tests' / 'cpu_site'}{os.pathsep}{repo}"
    env = {**os.environ, "NATS_URL": one_server.url, "PYTHONPATH": site, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, cwd=repo, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    print(done.stdout[-1500:])
    assert done.returncode == 0, done.stderr[-4000:]
    assert "trained 3 step(s) of run trl-async-" in done.stdout
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()


class Crash(Exception):
    """What stops the first trainer of the resume test, as a crash would."""


def test_a_trainer_restarted_on_its_run_finishes_the_open_groups_with_the_rollouts_already_done(
    one_server: Bus, tmp_path: Path
) -> None:
    def crash(step: int) -> bool:
        if step == 6:
            raise Crash(f"the trainer died at step {step}")
        return False

    with pytest.raises(Crash):
        train(one_server, tmp_path / "first", steps=30, callbacks=(Steps(crash).callback,),
              worker_options={"run": "resumable", "max_inflight_groups": 6})  # fmt: skip
    run = train(one_server, tmp_path / "second", steps=6, worker_options={"run": "resumable", "resume": True})
    stream = run.worker.stream
    assert stream is not None
    print(
        f"the restarted trainer took over {len(stream.taken_over)} open group(s) and finished "
        f"{stream.finished_taken_over} of them from the rollouts its predecessor started; its versions "
        f"continued from {run.worker.publisher.base}"
    )
    assert stream.taken_over and stream.finished_taken_over >= 1
    assert run.worker.publisher.base >= 6  # the first trainer published a version per step
    assert len(run.rows) == 6 and run.total("rollout/failed_total") == 0
