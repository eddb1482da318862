"""The front and `collect` word a failure the same way: both settle a task through the run's
`RunBook`, so the `/run` a NeMo Gym client gets and the failure row `collect` writes for
the same agent nobody serves say the same thing.

Real processes: nats-server, two `gym-runner serve` workers, `gym-runner front`, `gym-runner collect`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gymbus.runner.collection._summary import ExitCode
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT
from tests.fake_openai import free_port
from tests.integration.test_bounded_results import environment_server_port, wait_listening
from tests.processes import spawn

pytestmark = pytest.mark.timeout(300)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
MCQA_AGENT = "mcqa_simple_agent"


def post_run(port: int, row: bytes) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/run", data=row)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_agent_nobody_serves_reads_the_same_at_the_front_and_in_collects_failures(
    own_server: str, tmp_path: Path
) -> None:
    weather = spawn(["serve", WEATHER, WEATHER_AGENT, "offline"], own_server, tmp_path / "weather.log")
    mcqa = spawn(["serve", "mcqa", MCQA_AGENT, "offline"], own_server, tmp_path / "mcqa.log")
    port = free_port()
    front = spawn(["front", WEATHER_AGENT, "--port", str(port)], own_server, tmp_path / "front.log")
    processes = [weather, mcqa, front]
    try:
        wait_listening(port, front, tmp_path / "front.log")
        run_at = environment_server_port(port, f"{WEATHER_AGENT}_environment_server")
        weather_row = (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()[0]
        assert post_run(run_at, weather_row.encode())[0] == 200
        weather.send_signal(signal.SIGTERM)
        weather.wait(30)
        time.sleep(1.0)  # its registrations lapse with its connection
        status, body = post_run(run_at, weather_row.encode())
        assert status == 503 and body["_ng_failure_class"] == "no_worker", body
        at_the_front = str(body["_ng_failure_message"])

        mcqa_row = (EXAMPLES / "mcqa.jsonl").read_text().splitlines()[0]
        rows = tmp_path / "rows.jsonl"
        rows.write_text(
            json.dumps({**json.loads(weather_row), "agent_ref": {"name": WEATHER_AGENT}})
            + "\n"
            + json.dumps({**json.loads(mcqa_row), "agent_ref": {"name": MCQA_AGENT}})
            + "\n"
        )
        out = tmp_path / "out.jsonl"
        env = {**os.environ, "NATS_URL": own_server}
        done = subprocess.run(
            [*RUNNER, "collect", "-i", str(rows), "-o", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == ExitCode.SOME_FAILED, done.stderr[-3000:]
        (failure,) = [json.loads(line) for line in (tmp_path / "out_failures.jsonl").read_text().splitlines()]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    assert failure["_ng_failure_class"] == "no_worker"
    in_collect = str(failure["_ng_failure_message"])
    assert in_collect.endswith(": " + at_the_front), (in_collect, at_the_front)
    assert at_the_front.startswith(f"no worker serves gym.agent.{WEATHER_AGENT}.run: ")
