"""Asynchronous GRPO with TRL on GymBus environments: rollouts run on the bus ahead of the
trainer, and each LoRA version reaches every vLLM server through the bus.

    python examples/trl/train_async.py --config examples/trl/async.yaml

The config names the model, the datasets to blend (NeMo Gym JSONL files, relative to the
config; `agent` runs a file's rows that name none), the LoRA adapter trained (`lora`), the
rollout worker's settings (`worker`: `policy`, `dynamic_sampling`, ...) and
`AsyncGRPOConfig` settings (`async_grpo`). On the bus at `NATS_URL` (or `--nats-url`) must
serve: the agents and environments of the datasets, the policy (`gym-runner serve vllm
--model-url <every vLLM server>`), and beside each vLLM server `gym-runner sync-adapters
--vllm-url <that server>`. Each vLLM server needs `--enable-lora --max-lora-rank <r>
--max-loras <max_staleness + 2 or more>` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`.

The trainer syncs the adapter after every step (TRL's own adapter sync, pointed at the
rollout worker's relay): versions travel as objects on the bus, so the servers may be on
other machines, added or restarted mid-run. `max_staleness` bounds how many versions old a
trained sample may be; generation runs that far ahead of training. `--resume RUN` continues
a run (its rollouts still on the bus are not run again) with `--resume-from-checkpoint`.
TRL 1.16's asynchronous trainer needs a GPU (its packed training forward fetches a
FlashAttention-3 kernel); `--no-adapters` trains without delivering adapters, to see the
reward stay where it started when the servers never see the policy.
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
    parser.add_argument(
        "--config", type=Path, required=True, help="YAML: model, datasets, lora, worker, async_grpo"
    )
    parser.add_argument("--model", help="model name or directory (default: the config's)")
    parser.add_argument("--nats-url", default=os.environ.get("NATS_URL"), help="the bus (default $NATS_URL)")
    parser.add_argument("--max-steps", type=int, help="override the config's max_steps")
    parser.add_argument("--output-dir", help="override the config's output_dir")
    parser.add_argument(
        "--resume", metavar="RUN", help="continue run RUN (printed when a run stops on an error)"
    )
    parser.add_argument(
        "--resume-from-checkpoint", help="the checkpoint directory to resume the trainer from"
    )
    parser.add_argument(
        "--no-adapters", action="store_true", help="deliver no adapter: the servers keep the base model"
    )
    args = parser.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    model = args.model or config["model"]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from gymbus.runner import BusRolloutWorker, tasks_dataset

    sources = [(args.config.parent / entry["path"], entry.get("agent")) for entry in config["datasets"]]
    dataset = tasks_dataset(sources)
    settings = dict(config.get("async_grpo", {}))
    settings.update({key: value for key, value in (("max_steps", args.max_steps), ("output_dir", args.output_dir))
                     if value is not None})  # fmt: skip
    grpo = AsyncGRPOConfig(**settings)
    worker = BusRolloutWorker(
        grpo, dataset, args.nats_url, run=args.resume, resume=args.resume is not None,
        deliver_adapters=not args.no_adapters, **_worker_settings(config),
    )  # fmt: skip
    trainer = AsyncGRPOTrainer(
        model=model,
        args=grpo,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=LoraConfig(**config["lora"]),
        rollout_worker=worker,
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model()
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    first, last = rewards[:5], rewards[-5:]
    print(
        f"trained {trainer.state.global_step} step(s) of run {worker.run_id} from {len(dataset)} tasks; mean reward "
        f"{sum(first) / max(1, len(first)):.3f} (first 5 steps) -> {sum(last) / max(1, len(last)):.3f} (last 5); "
        f"saved to {grpo.output_dir}",
        flush=True,
    )
    return 0


def _worker_settings(config: dict[str, Any]) -> dict[str, Any]:
    known = {"policy", "dynamic_sampling", "max_inflight_groups", "rollout_timeout"}
    settings = dict(config.get("worker", {}))
    unknown = sorted(set(settings) - known)
    if unknown:
        raise SystemExit(
            f"unknown worker settings in the config: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return settings


if __name__ == "__main__":
    raise SystemExit(main())
