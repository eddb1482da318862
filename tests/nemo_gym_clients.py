"""NeMo Gym 0.7.0's own client code, unmodified, run by the tests in NeMo Gym's Python 3.13
environment against GymBus's front: `python tests/nemo_gym_clients.py run_examples HEAD_PORT ROWS`
prints one JSON line per `(row, result)` that `RolloutCollectionHelper().run_examples`
yields (a `/run` that failed: `{"error": ...}`), then the head config's servers."""

from __future__ import annotations

import asyncio
import json
import sys


async def run_examples(port: int, rows_path: str) -> None:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.rollout_collection import RolloutCollectionHelper

    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    head = BaseServerConfig(host="127.0.0.1", port=port)
    for future in RolloutCollectionHelper().run_examples(rows, head, route_failures_to_sidecar=True):
        row, result = await future
        print(json.dumps({"row": row, "result": result}), flush=True)


async def verify(port: int, server: str, body_path: str) -> None:
    """As Unsloth's reward function: find `server` through the head server, POST `/verify`."""
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient, get_response_json

    client = ServerClient.load_from_global_config(BaseServerConfig(host="127.0.0.1", port=port))
    response = await client.post(server_name=server, url_path="/verify", json=json.load(open(body_path)))
    print(json.dumps({"status": response.status, "body": await get_response_json(response)}), flush=True)


if __name__ == "__main__":
    command, port, *rest = sys.argv[1:]
    sys.argv[1:] = []  # NeMo Gym reads its own config overrides from the command line
    asyncio.run({"run_examples": run_examples, "verify": verify}[command](int(port), *rest))
