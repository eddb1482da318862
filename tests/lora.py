"""LoRA on the tests' vLLM server: the flags and environment that let it load adapters at
run time, and PEFT adapters for the tiny model.

The flags are TRL's for adapter sync (`reference/trainers.md` §5): `--max-loras` must be at
least `max_staleness + 2` (TRL checks it), `--max-lora-rank` at least the adapter's rank.
`VLLM_SERVER_DEV_MODE` exposes `/server_info`, where a syncer reads those limits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.tiny_model import tiny_model_dir

__all__ = ["LORA_ARGS", "LORA_ENV", "LORA_RANK", "SAME_WEIGHTS", "TARGET_MODULES", "Syncer", "make_adapter"]

LORA_RANK = 8
LORA_ARGS = ["--enable-lora", "--max-lora-rank", str(LORA_RANK), "--max-loras", "4", "--max-cpu-loras", "8"]
LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "VLLM_SERVER_DEV_MODE": "1"}
SAME_WEIGHTS = 1e-3
"""Largest difference of one token's logprob, vLLM's against HF + PEFT's, for the same
weights. Both compute in float32, in different orders (vLLM's CPU kernels differ by
instruction set): measured 3e-6 on one machine, 1.5e-4 on another. Different weights (another
adapter, the base model) differ by more than 1 on these random adapters."""
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(directory: Path, seed: int, scale: float = 0.5, rank: int = LORA_RANK) -> Path:
    """A PEFT LoRA adapter for the tiny model with random, non-zero weights (so it changes
    the model's logprobs), saved in `directory`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=TARGET_MODULES,
        init_lora_weights=False,
    )  # fmt: skip
    peft = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in peft.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn_like(parameter) * scale)
    peft.save_pretrained(directory)
    return directory


class Syncer:
    """A `gym-runner sync-adapters` process beside a vLLM server, its output in `log`."""

    def __init__(
        self, nats_url: str, server: str, directory: Path, log: Path, policy: str = "policy"
    ) -> None:
        self.directory = directory
        command = [
            sys.executable, "-P", "-m", "gymbus.runner", "sync-adapters", "--vllm-url", server,
            "--policy", policy, "--adapter-dir", str(directory),
        ]  # fmt: skip
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, env={**os.environ, "NATS_URL": nats_url}, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while b"ready: syncing adapters" not in log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sync-adapters did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
