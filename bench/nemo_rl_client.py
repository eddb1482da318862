"""NeMo RL's call to NeMo Gym, for P14, run in NeMo Gym's own environment (it imports
nothing of GymBus): `python -P nemo_rl_client.py CONFIG.json ROWS.jsonl` (`-P`: its folder
holds a `nemo_gym.py` of the benchmark's own, which must not shadow NeMo Gym).

As NeMo RL does each run: `RunHelper().start` on its config dict, `run_examples` on every
row at once, then `helper.shutdown()`. Between the steps it prints a line and waits for
one on stdin, so the benchmark can read the CPU time of every process NeMo Gym started
while they all still run:

    P14 started <seconds RunHelper().start took> <this process's CPU seconds so far>
    P14 done <results> <failures> <monotonic time of the last result> <this process's CPU seconds>
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

MARK = "P14 "
"""Starts the lines meant for the benchmark, among what NeMo Gym's servers print."""


async def main(config_path: str, rows_path: str) -> None:
    from nemo_gym.cli.env import RunHelper
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.global_config import GlobalConfigDictParserConfig
    from nemo_gym.rollout_collection import RolloutCollectionHelper
    from omegaconf import OmegaConf

    config = json.load(open(config_path))
    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    helper = RunHelper()
    began = time.monotonic()
    helper.start(
        GlobalConfigDictParserConfig(
            initial_global_config_dict=OmegaConf.create(config), skip_load_from_cli=True
        )
    )
    try:
        _say(f"{MARK}started {time.monotonic() - began:.3f} {time.process_time():.3f}")
        head = BaseServerConfig(**config["head_server"])
        results = failures = 0
        last = 0.0
        for future in RolloutCollectionHelper().run_examples(rows, head, route_failures_to_sidecar=True):
            _, result = await future
            last = time.monotonic()
            if "_ng_failure_class" in result or not isinstance(result.get("reward"), float):
                failures += 1
            results += 1
        _say(f"{MARK}done {results} {failures} {last:.6f} {time.process_time():.3f}")
    finally:
        helper.shutdown()


def _say(line: str) -> None:
    """Print `line`, then wait for the benchmark's go-ahead."""
    print(line, flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.argv[1:] = []  # NeMo Gym reads its own config overrides from the command line
    asyncio.run(main(*arguments))
