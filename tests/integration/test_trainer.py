"""TRL's GRPOTrainer learning from rollouts that real GymBus workers collect over the bus,
with a real vLLM server serving the very model the trainer trains.

The processes: a nats-server of this module's own (its agents' durable consumers are made
with this module's short ack wait), one `gym-runner serve` process with the weather and
multi-turn environments and the `vllm` model function as the policy, one with the offline
policy as the multi-turn agent's user simulator, and agent workers started by each test.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import NotFoundError

from gymbus import bus
from gymbus.bus import ServeOptions, subjects, wait_served
from gymbus.bus.hosting import agent_consumer
from gymbus.functions import ModelOptions
from gymbus.runner import BusRollouts, environment_reward, tasks_dataset
from gymbus.runner._workers import WorkerProcesses
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, Rollout, item_text
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import MODEL_NAME, VllmServer

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

# Starting vLLM (session fixture) takes 20-70 s on two cores, and a step's rollouts a few more.
pytestmark = pytest.mark.timeout(600)

MULTI_TURN = "example_multi_turn"
MULTI_TURN_AGENT = "example_multi_turn_agent"
ACK_WAIT = 3.0
"""Seconds before a dead agent worker's task goes to another (the default is a minute)."""
# The tiny model is random: steered by the test server's regex logits processor
# (tests/vllm_steering.py) it writes a get_weather call in the Hermes format or a short answer,
# so rollouts call tools and take several steps. The processor masks tokens after vLLM has
# computed the logprobs it reports, so those stay the model's own (raw) logprobs, which is what
# the trainer's forward pass computes too: the importance ratio below checks that every token
# id and logprob lines up with the trainer's, not how far a sampler strayed from the policy.
STEER = (
    r'(<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]{2,8}"\}\}\n</tool_call>'
    r"|It is (cold|sunny|rainy)\.)"
)
AGENT_OPTIONS = ServeOptions(
    functions=(WEATHER_AGENT, MULTI_TURN_AGENT),
    limits=replace(DEFAULT_LIMITS, agent_concurrency=2),
    timeouts=replace(DEFAULT_TIMEOUTS, ack_wait=ACK_WAIT),
)


@pytest.fixture(scope="module")
def trainer_bus(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    server = bus.EmbeddedServer()
    url = server.start()
    fleet = Fleet(url, tmp_path_factory.mktemp("trainer") / "workers.log")
    policy = ModelOptions(base_url=vllm_server.url, model=MODEL_NAME, api="vllm")
    try:
        fleet.start(
            ServeOptions(functions=(WEATHER, MULTI_TURN, "vllm"), model=policy), [WEATHER, MULTI_TURN]
        )
        fleet.start(ServeOptions(functions=("offline",), served_model="user_simulator"), ["user_simulator"])
        yield fleet
    finally:
        fleet.stop()
        server.stop()


class Fleet:
    """Worker processes on one bus, stopped together."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log
        self.groups: list[WorkerProcesses] = []

    def start(self, options: ServeOptions, services: list[str], count: int = 1) -> WorkerProcesses:
        group = WorkerProcesses(options, self.url, self.log, count)
        self.groups.append(group)
        group.start()
        asyncio.run(self._wait(services, group))
        return group

    async def _wait(self, services: list[str], group: WorkerProcesses) -> None:
        nc = await bus.connect(self.url, name="test")
        try:
            await wait_served(nc, services, timeout=120, check=group.check)
        finally:
            await nc.close()

    def stop(self) -> None:
        for group in self.groups:
            group.stop(15)


@pytest.fixture
def agents(trainer_bus: Fleet) -> Iterator[Callable[[int], WorkerProcesses]]:
    """Starts agent workers for a test (each with at most two rollouts at once); stops them after."""
    started: list[WorkerProcesses] = []

    def start(count: int) -> WorkerProcesses:
        group = trainer_bus.start(AGENT_OPTIONS, [WEATHER_AGENT, MULTI_TURN_AGENT], count)
        started.append(group)
        return group

    yield start
    for group in started:
        group.stop(15)


def steered(source: Path, target: Path) -> Path:
    """`source`'s rows, each asking the server to steer the policy's text with `STEER`."""
    with open(target, "w") as out:
        for line in source.read_text().splitlines():
            row = json.loads(line)
            extra = {"vllm_xargs": {"gymbus_regex": STEER}}
            row["responses_create_params"]["metadata"] = {"extra_body": json.dumps(extra)}
            out.write(json.dumps(row) + "\n")
    return target


def grpo_config(output: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = {
        "output_dir": str(output),
        "use_cpu": True,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_steps": 1,
        "max_completion_length": 64,
        # Temperature 1 and top_p 1: the server's logprobs (raw, vLLM's default mode) are
        # then exactly the distribution the trainer computes.
        "temperature": 1.0,
        "top_p": 1.0,
        # float32 like the server (GRPOConfig defaults to bf16, whose rounding alone moves
        # the importance ratio by up to 20% on this model).
        "bf16": False,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
        "dataloader_num_workers": 0,
        **overrides,
    }
    return trl.GRPOConfig(**settings)


def trainer_for(dataset: Any, rollouts: Any, config: Any, reward_funcs: list[Any] | None = None) -> Any:
    from transformers import AutoTokenizer

    model = tiny_model_dir()
    return trl.GRPOTrainer(
        model=str(model),
        processing_class=AutoTokenizer.from_pretrained(model),
        reward_funcs=reward_funcs or [environment_reward],
        train_dataset=dataset,
        rollout_func=rollouts,
        args=config,
    )


class WeightsAlreadyServed:
    """Stands in for TRL's `VLLMGeneration` in server mode, which here would only push the
    trainer's weights to the vLLM server before the step's rollouts: that transfer needs a
    GPU (NCCL). It is the one part replaced. The server already serves the very weights the
    trainer starts from, the rollout function does all the generating, and TRL's importance
    sampling (`use_vllm=True`) runs unchanged on the logprobs the server returned."""

    def __init__(self, **kwargs: Any) -> None:
        self.syncs = 0
        # The test server reports raw logprobs (vLLM's default), what TRL warns about: at
        # temperature 1 they are what the trainer computes (see STEER).
        self.vllm_client = type("Client", (), {"get_server_info": lambda self: _RAW_LOGPROBS})()

    def sync_weights(self) -> None:
        self.syncs += 1


_RAW_LOGPROBS = {"model_config": {"logprobs_mode": "raw_logprobs"}}


class Recorder:
    """The rollout function, recording what TRL got and the trainer's own logprobs of the
    same tokens, computed before the step changes the weights."""

    def __init__(self, rollouts: BusRollouts) -> None:
        self.rollouts = rollouts
        self.prompts: list[Any] = []
        self.output: dict[str, list[Any]] = {}
        self.trainer_logprobs: list[list[float]] = []
        self.reward_kwargs: list[dict[str, Any]] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        self.prompts = prompts
        self.output = self.rollouts(prompts, trainer)
        self.trainer_logprobs = [
            model_logprobs(trainer.model, prompt, completion)
            for prompt, completion in zip(
                self.output["prompt_ids"], self.output["completion_ids"], strict=True
            )
        ]
        return self.output

    def reward(self, completions: list[Any], **kwargs: Any) -> list[float]:
        """A reward function that keeps what TRL passed it, and returns the environment's reward."""
        self.reward_kwargs.append(kwargs)
        return environment_reward(completions, **kwargs)


def model_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> list[float]:
    """Logprob of each completion token under `model`, a plain softmax at `temperature`,
    one forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
        return logprobs.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()


def shorter_is_better(
    completion_ids: list[list[int]], env_reward: list[float | None], **kwargs: Any
) -> list[float | None]:
    """A second reward that differs within a group, so the step's advantages are not all
    zero: an environment's reward alone is often the same for every rollout of a prompt.
    `None` for a failed rollout, as every reward function must give it."""
    return [
        None if env is None else -len(ids) / 100 for ids, env in zip(completion_ids, env_reward, strict=True)
    ]


def test_one_grpo_step_on_a_batch_mixing_two_environments(
    agents: Callable[[int], WorkerProcesses],
    tmp_path: Path,
    trainer_bus: Fleet,
    vllm_server: VllmServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agents(1)
    monkeypatch.setattr("trl.trainer.grpo_trainer.VLLMGeneration", WeightsAlreadyServed)
    weather = steered(EXAMPLES / f"{WEATHER}.jsonl", tmp_path / "weather.jsonl")
    multi_turn = steered(EXAMPLES / f"{MULTI_TURN}.jsonl", tmp_path / "multi_turn.jsonl")
    # One weather row, one multi-turn row: every batch of two prompts has both.
    dataset = tasks_dataset([(weather, WEATHER_AGENT), multi_turn]).select([0, 5])
    with BusRollouts(trainer_bus.url, rollout_timeout=120) as rollouts:
        recorder = Recorder(rollouts)
        config = grpo_config(
            tmp_path,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=vllm_server.root,
            vllm_importance_sampling_correction=True,
        )
        trainer = trainer_for(dataset, recorder, config, [recorder.reward, shorter_is_better])
        before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
        trainer.train()
        rows = [msgspec.json.decode(row, type=Rollout) for row in rollouts.last_rows]
        failures = dict(rollouts.failures)

    out, prompts = recorder.output, recorder.prompts
    assert failures == {}
    assert trainer.vllm_generation.syncs == 1  # where the weights would have gone to vLLM

    # TRL's shapes: one entry per prompt, a mask and a logprob per completion token.
    assert len(prompts) == 4 and prompts[0] == prompts[1] and prompts[2] == prompts[3]
    agents_seen = {row.agent_ref.name for row in rows if row.agent_ref}
    assert agents_seen == {WEATHER_AGENT, MULTI_TURN_AGENT}
    for key in ("prompt_ids", "completion_ids", "env_mask", "logprobs", "env_reward", "num_turns"):
        assert len(out[key]) == 4, key
    for completion, mask, logprobs in zip(
        out["completion_ids"], out["env_mask"], out["logprobs"], strict=True
    ):
        assert len(completion) == len(mask) == len(logprobs) > 0
        assert set(mask) <= {0, 1} and all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)

    # The masks: 1 on exactly the tokens the model generated, 0 on what the environment said.
    tokenizer = trainer.processing_class
    environment_turns = 0
    for row, completion, mask in zip(rows, out["completion_ids"], out["env_mask"], strict=True):
        assert row.response is not msgspec.UNSET
        items = row.response.output
        generated = [
            token for item in items if item.generation_token_ids for token in item.generation_token_ids
        ]
        assert [t for t, m in zip(completion, mask, strict=True) if m == 1] == generated
        environment = tokenizer.decode([t for t, m in zip(completion, mask, strict=True) if m == 0])
        # What the environment said after the last model call (a tool output when the agent
        # ran out of steps) was never part of a prompt, so it is in no token.
        last_call = max(at for at, item in enumerate(items) if item.generation_token_ids)
        for item in items[:last_call]:
            said = item.output if item.kind == "function_call_output" else None
            if item.kind == "message" and item.role == "user":
                said = item_text(item)
            if isinstance(said, str):
                environment_turns += 1
                assert said in environment
    assert environment_turns > 0, "no rollout had a tool output or a user message between model calls"

    # The environment's rewards reached the reward function, row for row.
    assert recorder.reward_kwargs[0]["env_reward"] == out["env_reward"] == [row.reward for row in rows]
    assert recorder.reward_kwargs[0]["num_turns"] == out["num_turns"]

    # Importance ratio trainer/vLLM over the model's tokens: ours, and TRL's own.
    ratios = [
        math.exp(mine - theirs)
        for mask, vllm_logprobs, trainer_logprobs in zip(
            out["env_mask"], out["logprobs"], recorder.trainer_logprobs, strict=True
        )
        for m, theirs, mine in zip(mask, vllm_logprobs, trainer_logprobs, strict=True)
        if m == 1
    ]
    print(f"importance ratio over {len(ratios)} model tokens: min {min(ratios):.6f}, max {max(ratios):.6f}")
    assert 0.99 <= min(ratios) <= max(ratios) <= 1.01
    logged = next(entry for entry in trainer.state.log_history if "grad_norm" in entry)
    assert 0.99 <= logged["sampling/importance_sampling_ratio/min"]
    assert logged["sampling/importance_sampling_ratio/max"] <= 1.01

    # A real step: non-zero gradients changed the weights.
    print(
        f"grad norm {logged['grad_norm']:.6f}; prompt_ids {[len(p) for p in out['prompt_ids']]}, "
        f"completion_ids {[len(c) for c in out['completion_ids']]}, of which environment tokens "
        f"{[m.count(0) for m in out['env_mask']]}; TRL's ratio {logged['sampling/importance_sampling_ratio/min']:.6f}"
        f"-{logged['sampling/importance_sampling_ratio/max']:.6f}"
    )
    assert logged["grad_norm"] > 0 and math.isfinite(logged["grad_norm"])
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])]
    assert changed


def test_a_killed_agent_worker_costs_a_redelivery_not_a_row(
    agents: Callable[[int], WorkerProcesses], tmp_path: Path, trainer_bus: Fleet
) -> None:
    workers = agents(2)  # each runs at most two rollouts at once, so both get some
    dataset = tasks_dataset(steered(EXAMPLES / f"{MULTI_TURN}.jsonl", tmp_path / "multi_turn.jsonl"))
    prompts = [prompt for prompt in dataset["prompt"] for _ in range(2)]
    with BusRollouts(trainer_bus.url, rollout_timeout=120) as rollouts:
        trainer = trainer_for(dataset, rollouts, grpo_config(tmp_path, per_device_train_batch_size=8))
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(rollouts, prompts, trainer)
            killed_at = asyncio.run(kill_when_both_busy(trainer_bus.url, workers.children[0].pid))
            out = batch.result(timeout=180)
        rows = [msgspec.json.decode(row, type=Rollout) for row in rollouts.last_rows]
    assert workers.children[0].wait(5) == -signal.SIGKILL
    assert rollouts.failures == {}
    assert len(out["completion_ids"]) == len(prompts) == 8
    assert all(any(mask) for mask in out["env_mask"])  # every row is a real rollout, none a placeholder
    redelivered = [row for row in rows if row.stats is not msgspec.UNSET and row.stats.delivery > 1]
    assert redelivered, f"the kill at {killed_at:.1f} s landed after the victim's rollouts were done"


def test_failed_rollouts_train_as_masked_placeholders_and_are_counted(
    agents: Callable[[int], WorkerProcesses], tmp_path: Path, trainer_bus: Fleet
) -> None:
    agents(1)
    weather = steered(EXAMPLES / f"{WEATHER}.jsonl", tmp_path / "weather.jsonl")
    orphan = tmp_path / "orphan.jsonl"  # an agent no worker serves
    orphan.write_text(json.dumps({"responses_create_params": {"input": "Anyone there?"}}) + "\n")
    dataset = tasks_dataset([(weather, WEATHER_AGENT), (orphan, "nobody_agent")]).select([0, 5])
    prompts = [prompt for prompt in dataset["prompt"] for _ in range(2)]
    timeouts = replace(DEFAULT_TIMEOUTS, worker_start=0.5)
    with BusRollouts(trainer_bus.url, rollout_timeout=120, timeouts=timeouts) as rollouts:
        trainer = trainer_for(dataset, rollouts, grpo_config(tmp_path))
        trainer.model.train()
        out = rollouts(prompts, trainer)
        eos = trainer.processing_class.eos_token_id
        assert rollouts.failures == {"no_worker": 2}
        assert trainer._metrics["train"]["gymbus/failed_rollouts"] == [2.0]
        for key, placeholder in (("prompt_ids", [eos]), ("completion_ids", [eos]), ("env_mask", [0])):
            assert out[key][2:] == [placeholder, placeholder], key
        assert out["env_reward"][2:] == [None, None] and out["num_turns"][2:] == [0, 0]
        assert all(any(mask) for mask in out["env_mask"][:2])  # the weather rollouts are real

        with pytest.raises(RuntimeError, match=r"every rollout of the batch failed \(2 no_worker\)"):
            rollouts(prompts[2:], trainer)


async def kill_when_both_busy(url: str, victim: int, timeout: float = 60.0) -> float:
    """SIGKILL `victim` once more than two multi-turn tasks are out at once: with two
    rollouts at most per worker, both workers (the victim too) are then mid-rollout."""
    return await _kill_when_pending(url, MULTI_TURN_AGENT, victim, 2, timeout)


def wait_idle(url: str, agent: str, timeout: float = 60.0) -> None:
    """Until `agent`'s queue holds no task and its workers hold none: an earlier run's
    rollouts, still running, would otherwise count as this run's in `kill_when_busy`."""
    asyncio.run(_wait_idle(url, agent, timeout))


async def _wait_idle(url: str, agent: str, timeout: float) -> None:
    nc = await bus.connect(url, name="test")
    js = nc.js
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                info = await js.consumer_info(subjects.TASKS_STREAM, agent_consumer(agent))
            except NotFoundError:  # no task was ever queued for it (the test runs alone)
                return
            if info.num_pending == 0 and info.num_ack_pending == 0:
                return
            assert time.monotonic() < deadline, f"{agent}'s queue still busy after {timeout:.0f} s: {info}"
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


def queued_tasks(url: str, agent: str) -> int:
    """Tasks waiting in `agent`'s queue for a worker."""

    async def count() -> int:
        nc = await bus.connect(url, name="test")
        try:
            return int((await nc.js.consumer_info(subjects.TASKS_STREAM, agent_consumer(agent))).num_pending)
        finally:
            await nc.close()

    return asyncio.run(count())


def kill_when_busy(url: str, agent: str, victim: int, busy: int, timeout: float = 60.0) -> float:
    """SIGKILL `victim` once more than `busy` tasks of `agent` are out at once, which one
    other worker holding at most `busy` cannot all hold; seconds until then."""
    return asyncio.run(_kill_when_pending(url, agent, victim, busy, timeout))


async def _kill_when_pending(url: str, agent: str, victim: int, busy: int, timeout: float) -> float:
    nc = await bus.connect(url, name="test")
    js = nc.js
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout:
            try:
                info = await js.consumer_info(subjects.TASKS_STREAM, agent_consumer(agent))
            except Exception:  # noqa: BLE001 - not made yet
                info = None
            if info is not None and info.num_ack_pending > busy:
                os.kill(victim, signal.SIGKILL)
                return time.monotonic() - started
            await asyncio.sleep(0.01)
    finally:
        await nc.close()
    raise AssertionError(f"the agent workers never had more than {busy} rollouts out at once")


REPO = Path(__file__).resolve().parents[2]


def documented_train_command() -> list[str]:
    """The CPU training command of the docs' training page, as written there."""
    lines = (REPO / "docs" / "training.md").read_text().splitlines()
    line = next(line for line in lines if line.startswith(".venv/bin/python examples/trl/train.py"))
    return shlex.split(line)


def test_the_documented_command_trains_one_step_on_a_cpu(
    agents: Callable[[int], WorkerProcesses], trainer_bus: Fleet, tmp_path: Path
) -> None:
    agents(1)
    command = documented_train_command()
    assert command[0] == ".venv/bin/python" and "$MODEL" in command
    command = [sys.executable if part == ".venv/bin/python" else part for part in command]
    command = [str(tiny_model_dir()) if part == "$MODEL" else part for part in command]
    # Only the checkpoint goes elsewhere: into the test's directory, not the repository.
    command += ["--output-dir", str(tmp_path / "out")]
    done = subprocess.run(
        command,
        check=False,
        cwd=REPO,
        env={**os.environ, "NATS_URL": trainer_bus.url},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 1 step(s) on 4 rollouts (0 failed)" in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_a_row_that_would_change_the_trainers_sampling_is_refused(
    agents: Callable[[int], WorkerProcesses], tmp_path: Path, trainer_bus: Fleet
) -> None:
    agents(1)
    rows = [json.loads(line) for line in (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()]
    rows[1]["responses_create_params"]["metadata"] = {"extra_body": json.dumps({"top_k": 5})}
    data = tmp_path / "weather.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = tasks_dataset((data, WEATHER_AGENT)).select([0, 1])
    with BusRollouts(trainer_bus.url, rollout_timeout=120) as rollouts:
        trainer = trainer_for(dataset, rollouts, grpo_config(tmp_path))
        with pytest.raises(ValueError) as refused:
            trainer.train()
        assert rollouts.rollouts == 0 and trainer.state.global_step == 0
    message = str(refused.value)
    print(message)
    assert f"task row 1 of the trainer's dataset ({data}:2)" in message
    assert "responses_create_params.metadata.extra_body.top_k" in message


def test_weights_synced_to_a_server_the_policy_does_not_use_are_refused_before_training(
    agents: Callable[[int], WorkerProcesses],
    tmp_path: Path,
    trainer_bus: Fleet,
    vllm_server: VllmServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agents(1)
    monkeypatch.setattr("trl.trainer.grpo_trainer.VLLMGeneration", WeightsAlreadyServed)
    dataset = tasks_dataset((EXAMPLES / f"{WEATHER}.jsonl", WEATHER_AGENT)).select([0, 1])
    elsewhere = "http://127.0.0.1:9"
    config = grpo_config(tmp_path, use_vllm=True, vllm_mode="server", vllm_server_base_url=elsewhere)
    with BusRollouts(trainer_bus.url, rollout_timeout=120) as rollouts:
        trainer = trainer_for(dataset, rollouts, config)
        with pytest.raises(ValueError) as refused:
            trainer.train()
        assert rollouts.rollouts == 0 and trainer.state.global_step == 0
    message = str(refused.value)
    print(message)
    assert f"syncs its weights to {elsewhere}" in message
    assert f"model `policy`, the policy its agents call, generates on {vllm_server.root}" in message


def test_when_one_training_process_must_stop_every_process_stops_with_its_reason(
    agents: Callable[[int], WorkerProcesses], tmp_path: Path, trainer_bus: Fleet
) -> None:
    agents(1)
    weather = steered(EXAMPLES / f"{WEATHER}.jsonl", tmp_path / "weather.jsonl")
    orphan = tmp_path / "orphan.jsonl"  # an agent no worker serves: process 1's rollouts all fail
    orphan.write_text(json.dumps({"responses_create_params": {"input": "Anyone there?"}}) + "\n")
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--monitor_interval", "5",
        str(Path(__file__).with_name("two_ranks.py")), trainer_bus.url, str(tmp_path),
        f"{weather}:{WEATHER_AGENT}", f"{orphan}:nobody_agent",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    started = time.monotonic()
    done = subprocess.run(launch, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    took = time.monotonic() - started
    written = [tmp_path / f"rank{rank}.txt" for rank in (0, 1)]
    outcomes = [path.read_text() if path.exists() else "(ended without a reason)" for path in written]
    print(f"both processes exited in {took:.1f} s: {outcomes}")
    assert done.returncode != 0, done.stdout[-2000:]
    assert took < 60
    assert outcomes[0] == outcomes[1], done.stderr[-3000:]
    assert "rank 1 of 2" in outcomes[0] and "every rollout of the batch failed (2 no_worker)" in outcomes[0]
