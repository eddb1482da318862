"""A failed rollout does not move its group's advantages: TRL's own GRPO step, on what the
rollout function returns for a group with a failure in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gymbus.runner import BusRollouts, environment_reward
from gymbus.schemas import FAILURE_CLASS, FAILURE_MESSAGE
from tests.tiny_model import tiny_model_dir

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

pytestmark = pytest.mark.timeout(300)

PROMPT = [{"role": "user", "content": "what is the weather in paris"}]


def rollout(reward: float, generation: list[int]) -> bytes:
    """A rewarded rollout row of one model call, with its token ids."""
    call = {
        "type": "message",
        "role": "assistant",
        "content": "...",
        "prompt_token_ids": [5, 6, 7, 8],
        "generation_token_ids": generation,
        "generation_log_probs": [-1.0] * len(generation),
    }
    response = {"id": "r", "created_at": 0, "model": "tiny", "output": [call]}
    return json.dumps(
        {"responses_create_params": {"input": "q"}, "response": response, "reward": reward}
    ).encode()


def failed() -> bytes:
    row = {
        "responses_create_params": {"input": "q"},
        FAILURE_CLASS: "model_failed",
        FAILURE_MESSAGE: "HTTP 500",
    }
    return json.dumps(row).encode()


def advantages_of(rows: list[bytes], tmp_path: Path) -> list[float]:
    """The advantages TRL's GRPOTrainer gives one group made of `rows`."""
    rollouts = BusRollouts("nats://127.0.0.1:1")  # never connects: the rows are given

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        assert len(prompts) == len(rows)
        return rollouts._outputs(rows, trainer)

    from transformers import AutoTokenizer

    model = tiny_model_dir()
    config = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        num_generations=len(rows),
        per_device_train_batch_size=len(rows),
        max_steps=1,
        max_completion_length=8,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=str(model),
        processing_class=AutoTokenizer.from_pretrained(model),
        reward_funcs=[environment_reward],
        train_dataset=datasets.Dataset.from_dict({"prompt": [PROMPT]}),
        rollout_func=rollout_func,
        args=config,
    )
    seen: list[list[float]] = []
    score = trainer._generate_and_score_completions

    def recording(inputs: Any) -> Any:
        scored = score(inputs)
        seen.append(scored["advantages"].tolist())
        return scored

    trainer._generate_and_score_completions = recording
    trainer.train()
    assert len(seen) == 1
    return seen[0]


def test_a_failed_rollout_leaves_the_advantages_of_its_group_as_the_others_alone_give(tmp_path: Path) -> None:
    successes = [rollout(1.0, [9, 10]), rollout(0.0, [11]), rollout(0.25, [12, 13, 14])]
    with_failure = advantages_of([*successes, failed()], tmp_path / "four")
    alone = advantages_of(successes, tmp_path / "three")
    print(f"group of four with a failure: {with_failure}; the three alone: {alone}")
    assert with_failure[:3] == pytest.approx(alone, abs=1e-6)
    assert with_failure[3] == 0.0
    assert max(alone) > 0.5  # the three differ, so a skew would show
