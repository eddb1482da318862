"""The front's `/seed_session` and `/verify` as NeMo Gym 0.7.0's own base models define them,
checked by those models in NeMo Gym's environment: the request NeMo Gym's
`BaseSeedSessionRequest` makes (an empty body) seeds a session and is answered a
`BaseSeedSessionResponse`; a `/verify` of a `BaseVerifyRequest`, as NeMo Gym's agents
serialize it, is answered a `BaseVerifyResponse` that echoes the request with its reward.

Real processes: a nats-server, and the Unsloth recipe's `gym-runner serve` and `gym-runner
front` (tests/integration/test_front_recipes.py); NeMo Gym's code in its Python 3.13
environment (`sh scripts/install-nemo-gym.sh`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gymbus import bus
from tests.integration.test_front_recipes import MCQA, answered, first_row, recipe_front

pytestmark = pytest.mark.timeout(300)

CHECK = r"""
import json, sys, urllib.error, urllib.request
from nemo_gym.base_resources_server import (
    BaseSeedSessionRequest, BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse,
)

def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())

server, row = sys.argv[1], json.loads(sys.argv[2])
seed_status, seeded = post(f"{server}/seed_session", BaseSeedSessionRequest().model_dump(mode="json"))
BaseSeedSessionResponse.model_validate(seeded)
sent = BaseVerifyRequest.model_validate(row)
# As NeMo Gym's agents send it: the model's whole dump, with the row's own fields beside it.
status, verified = post(f"{server}/verify", {**row, **sent.model_dump(mode="json")})
answer = BaseVerifyResponse.model_validate(verified)
print(json.dumps({
    "seed_status": seed_status, "status": status, "reward": answer.reward,
    "echoed": answer.responses_create_params == sent.responses_create_params and answer.response == sent.response,
    "expected_answer": verified.get("expected_answer"),
}))
"""
"""Run in NeMo Gym's environment: `python -c CHECK SERVER_URL ROW_JSON`; prints what it found."""


def test_seed_session_and_verify_answer_nemo_gyms_base_models(nemo_gym_python: Path, tmp_path: Path) -> None:
    row = first_row(MCQA)
    request = answered(row, f"\\boxed{{{row['expected_answer']}}}")
    server = bus.EmbeddedServer()
    url = server.start()
    try:
        with recipe_front(url, tmp_path) as config:
            at = config[MCQA]["resources_servers"][MCQA]
            done = subprocess.run(
                [str(nemo_gym_python), "-c", CHECK, f"http://{at['host']}:{at['port']}", json.dumps(request)],
                capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )  # fmt: skip
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert found == {
        "seed_status": 200, "status": 200, "reward": 1.0, "echoed": True,
        "expected_answer": row["expected_answer"],
    }  # fmt: skip
