"""NeMo Gym 0.7.0's own client code, unmodified, run by the tests in NeMo Gym's Python 3.13
environment against GymBus's front: `python tests/nemo_gym_clients.py run_examples HEAD_PORT ROWS`
prints, after `MARK`, one JSON line per `(row, result)` that
`RolloutCollectionHelper().run_examples` yields; `start_and_run CONFIG.json ROWS` first starts
NeMo Gym from a config dict as NeMo RL does (`RunHelper().start`); `verify HEAD_PORT SERVER
BODY.json` posts `/verify` to a resources server found through the head server."""

from __future__ import annotations

import asyncio
import json
import sys

MARK = "NEMO-GYM-CLIENT\t"
"""Starts each line of what the clients got, among what NeMo Gym itself prints."""


async def run_examples(port: int, rows_path: str) -> None:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.rollout_collection import RolloutCollectionHelper

    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    head = BaseServerConfig(host="127.0.0.1", port=port)
    for future in RolloutCollectionHelper().run_examples(rows, head, route_failures_to_sidecar=True):
        row, result = await future
        print(MARK + json.dumps({"row": row, "result": result}), flush=True)


async def start_and_run(config_path: str, rows_path: str) -> None:
    """As NeMo RL does each run: `RunHelper().start` on its config dict (`config_paths`,
    `policy_base_url`, head server), then `run_examples` on the rows, then `shutdown`."""
    from nemo_gym.cli.env import RunHelper
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.global_config import GlobalConfigDictParserConfig
    from nemo_gym.rollout_collection import RolloutCollectionHelper
    from omegaconf import OmegaConf

    config = json.load(open(config_path))
    helper = RunHelper()
    initial = OmegaConf.create(config)
    helper.start(GlobalConfigDictParserConfig(initial_global_config_dict=initial, skip_load_from_cli=True))
    try:
        head = BaseServerConfig(**config["head_server"])
        rows = [json.loads(line) for line in open(rows_path) if line.strip()]
        for future in RolloutCollectionHelper().run_examples(rows, head):
            row, result = await future
            print(MARK + json.dumps({"row": row, "result": result}), flush=True)
    finally:
        helper.shutdown()


async def verify(port: int, server: str, body_path: str) -> None:
    """As Unsloth's reward function: find `server` through the head server, POST `/verify`."""
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient, get_response_json

    client = ServerClient.load_from_global_config(BaseServerConfig(host="127.0.0.1", port=port))
    response = await client.post(server_name=server, url_path="/verify", json=json.load(open(body_path)))
    answer = {"status": response.status, "body": await get_response_json(response)}
    print(MARK + json.dumps(answer), flush=True)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    sys.argv[1:] = []  # NeMo Gym reads its own config overrides from the command line
    if command == "start_and_run":
        asyncio.run(start_and_run(*rest))
    else:
        asyncio.run({"run_examples": run_examples, "verify": verify}[command](int(rest[0]), *rest[1:]))
