"""GRPO with TRL on GymBus environments: the seed's multi-environment TRL workflow, on the bus.

    python examples/trl/train.py --config examples/trl/config.yaml --vllm-url http://127.0.0.1:8000
    python examples/trl/train.py --config examples/trl/tiny.yaml --model "$MODEL" --cpu

The config names the model, the datasets to blend (NeMo Gym JSONL files, relative to the
config; `agent` runs a file's rows that name none) and `GRPOConfig` settings. Rollouts
run on the bus at `NATS_URL` (or `--nats-url`): agent workers, environments and the
policy (the `vllm` model function, pointed at the same vLLM server) must serve there.
Every rollout samples with the trainer's complete sampling parameters (temperature,
top_p, top_k, min_p, penalties, max_completion_length), so no server default applies.

On a GPU, TRL pushes the trainer's weights to that vLLM server before each batch of
rollouts (`--vllm-url`: vLLM started with `--weight-transfer-config`, as `trl
vllm-serve` does) and corrects for what differs with importance sampling; `--vllm-url`
must be the one server the policy's model function generates on (refused otherwise).
Several training GPUs: `accelerate launch --num_processes N examples/trl/train.py ...`. `--cpu` runs
without vLLM in the trainer (that transfer needs a GPU): vLLM keeps the first weights, so
only the first step is on-policy; it checks the wiring, it does not train a model.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

import yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, required=True, help="YAML: model, datasets, grpo")
    parser.add_argument("--model", help="model name or directory (default: the config's)")
    parser.add_argument("--nats-url", default=os.environ.get("NATS_URL"), help="the bus (default $NATS_URL)")
    parser.add_argument("--vllm-url", default="http://127.0.0.1:8000", help="vLLM server, for weight sync")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU, with no weight sync to vLLM")
    parser.add_argument("--max-steps", type=int, help="override the config's max_steps")
    parser.add_argument("--output-dir", help="override the config's output_dir")
    args = parser.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    model = args.model or config["model"]
    # The warning that rollout_func is experimental, once per run, is noise here.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gymbus.runner import BusRollouts, environment_reward, tasks_dataset

    sources = [(args.config.parent / entry["path"], entry.get("agent")) for entry in config["datasets"]]
    dataset = tasks_dataset(sources)
    grpo = GRPOConfig(**_grpo_settings(config, args))
    with BusRollouts(args.nats_url, rollout_timeout=float(config.get("rollout_timeout", 3600))) as rollouts:
        trainer = GRPOTrainer(
            model=model,
            processing_class=AutoTokenizer.from_pretrained(model),
            reward_funcs=environment_reward,
            train_dataset=dataset,
            rollout_func=rollouts,
            args=grpo,
        )
        trainer.train()
        trainer.save_model()
        print(
            f"trained {trainer.state.global_step} step(s) on {rollouts.rollouts} rollouts "
            f"({sum(rollouts.failures.values())} failed) from {len(dataset)} tasks; saved to {grpo.output_dir}",
            flush=True,
        )
    return 0


def _grpo_settings(config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    settings = dict(config.get("grpo", {}))
    if args.max_steps is not None:
        settings["max_steps"] = args.max_steps
    if args.output_dir is not None:
        settings["output_dir"] = args.output_dir
    if args.cpu:
        # float32 throughout: bf16 on a CPU is slow, and its rounding alone moves logprobs.
        settings.update(use_cpu=True, use_vllm=False, bf16=False)
    else:
        settings.update(use_vllm=True, vllm_mode="server", vllm_server_base_url=args.vllm_url)
    return settings


if __name__ == "__main__":
    raise SystemExit(main())
