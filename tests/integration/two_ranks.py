"""One GRPO step on two training processes whose batches differ: run by `accelerate launch
--num_processes 2` from `test_trainer.py`.

    two_ranks.py NATS_URL OUTPUT_DIR SERVED.jsonl:AGENT ORPHAN.jsonl:AGENT

The dataset holds one row of each file, in order; with two generations per prompt, two
prompts per step and no shuffling, process 0 gets the first row's rollouts and process 1
the second's. Each process writes what stopped it (or `trained`) to OUTPUT_DIR/rank<N>.txt
before it exits.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path


def main(url: str, output: Path, *sources: str) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gymbus.runner import BusRollouts, environment_reward, tasks_dataset
    from gymbus.schemas import DEFAULT_TIMEOUTS
    from tests.tiny_model import tiny_model_dir

    files = [(source.rsplit(":", 1)[0], source.rsplit(":", 1)[1]) for source in sources]
    dataset = tasks_dataset([files[0], files[1]])
    dataset = dataset.select([0, len(dataset) - 1])
    model = tiny_model_dir()
    config = GRPOConfig(
        output_dir=str(output),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        max_completion_length=32,
        shuffle_dataset=False,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    rank = int(os.environ.get("RANK", "0"))
    timeouts = replace(DEFAULT_TIMEOUTS, worker_start=0.5)
    outcome = "trained"
    try:
        with BusRollouts(url, rollout_timeout=120, timeouts=timeouts) as rollouts:
            trainer = GRPOTrainer(
                model=str(model),
                processing_class=AutoTokenizer.from_pretrained(model),
                reward_funcs=environment_reward,
                train_dataset=dataset,
                rollout_func=rollouts,
                args=config,
            )
            trainer.train()
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        (output / f"rank{rank}.txt").write_text(outcome)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
