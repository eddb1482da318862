"""Rollouts sample what the trainer means, whatever the model's own generation config says.

A vLLM server fills every sampling parameter a request leaves out from the model's
`generation_config.json`. Here the tiny model's says `top_k` 5 and `repetition_penalty`
1.3, and the server reports the sampler's own logprobs (`--logprobs-mode
processed_logprobs`, as TRL's `vllm-serve` runs it): those equal the trainer's softmax at
its temperature only if every request carries the trainer's complete sampling parameters.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbus import bus
from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.runner import BusRollouts, tasks_dataset
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT
from tests.integration.test_trainer import (
    Fleet,
    WeightsAlreadyServed,
    grpo_config,
    model_logprobs,
    trainer_for,
)
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import MODEL_NAME, VllmServer, vllm_python

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(600)

TEMPERATURE = 0.7
SERVER_DEFAULTS = {"top_k": 5, "repetition_penalty": 1.3}
"""What the model's generation config asks vLLM to apply to requests that leave them out."""


def model_with_defaults(target: Path) -> Path:
    """The tiny model, with a generation config of sampling defaults the trainer does not use."""
    shutil.copytree(tiny_model_dir(), target)
    (target / "generation_config.json").write_text(json.dumps({"do_sample": True, **SERVER_DEFAULTS}))
    return target


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VllmServer, Fleet]]:
    """A vLLM server reporting processed logprobs on that model, and a bus whose weather
    worker's policy is that server."""
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed: run `sh scripts/install-vllm.sh`")
    directory = tmp_path_factory.mktemp("sampling")
    server = VllmServer(
        python, model_with_defaults(directory / "model"), extra_args=["--logprobs-mode", "processed_logprobs"]
    )
    server.start()
    nats = bus.EmbeddedServer()
    fleet = Fleet(nats.start(), directory / "workers.log")
    policy = ModelOptions(base_url=server.url, model=MODEL_NAME, api="vllm")
    try:
        fleet.start(ServeOptions(functions=(WEATHER, "vllm", WEATHER_AGENT), model=policy), [WEATHER_AGENT])
        yield server, fleet
    finally:
        fleet.stop()
        nats.stop()
        server.stop()


class ProcessedLogprobsServed(WeightsAlreadyServed):
    """The stand-in for TRL's GPU weight transfer (see `WeightsAlreadyServed`), reporting
    the server's logprobs mode as this module's server runs it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        info = {"model_config": {"logprobs_mode": "processed_logprobs"}}
        self.vllm_client = type("Client", (), {"get_server_info": lambda self: info})()


def test_rollouts_sample_with_the_trainers_parameters_not_the_models_defaults(
    sampler: tuple[VllmServer, Fleet], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, fleet = sampler
    monkeypatch.setattr("trl.trainer.grpo_trainer.VLLMGeneration", ProcessedLogprobsServed)
    dataset = tasks_dataset((EXAMPLES / f"{WEATHER}.jsonl", WEATHER_AGENT)).select([0, 1])
    recorded: dict[str, Any] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = rollouts(prompts, trainer)
        recorded["out"] = out
        recorded["trainer"] = [
            model_logprobs(trainer.model, prompt, completion, TEMPERATURE)
            for prompt, completion in zip(out["prompt_ids"], out["completion_ids"], strict=True)
        ]
        return out

    with BusRollouts(fleet.url, rollout_timeout=120) as rollouts:
        config = grpo_config(
            tmp_path,
            temperature=TEMPERATURE,
            max_completion_length=24,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server.root,
            vllm_importance_sampling_correction=True,
        )
        trainer = trainer_for(dataset, rollout_func, config)
        trainer.train()
        assert rollouts.failures == {}

    out = recorded["out"]
    pairs = [
        (theirs, mine)
        for mask, vllm_logprobs, trainer_logprobs in zip(
            out["env_mask"], out["logprobs"], recorded["trainer"], strict=True
        )
        for m, theirs, mine in zip(mask, vllm_logprobs, trainer_logprobs, strict=True)
        if m == 1
    ]
    worst = max(abs(theirs - mine) for theirs, mine in pairs)
    print(
        f"{len(pairs)} model tokens: the server's logprobs differ from the trainer's by at most {worst:.2e}"
    )
    assert len(pairs) >= 8
    assert worst <= 1e-4
    logged = next(entry for entry in trainer.state.log_history if "grad_norm" in entry)
    low, high = (logged[f"sampling/importance_sampling_ratio/{end}"] for end in ("min", "max"))
    print(f"TRL's importance ratio {low:.6f}-{high:.6f}")
    assert 0.99 <= low <= high <= 1.01
    assert math.isfinite(logged["grad_norm"])
