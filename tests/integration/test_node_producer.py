"""The Node.js producer in examples/node (the official `nats` npm package, no Python) publishes
tasks to the durable queue of a locked bus and writes the rewarded rollouts that GymBus
workers, each with its own role, send back.

Node and the npm package come from `sh scripts/install-node.sh`. Without them the tests are
skipped, except in CI (`CI` set), where that is a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._cluster import NatsServers
from gymbus import bus, schemas
from gymbus.bus import wait_served
from gymbus.runner.security._secure import SecureLayout, secure_init
from tests.conftest import WEATHER, WEATHER_AGENT

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "examples" / "node"
PRODUCER = NODE_DIR / "producer.mjs"
EXAMPLE = ROOT / "examples" / "example_single_tool_call.jsonl"


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    missing = (
        "node is not installed" if found is None
        else "the nats npm package is not installed" if not (NODE_DIR / "node_modules" / "nats").is_dir()
        else None
    )  # fmt: skip
    if missing:
        message = f"{missing}: run `sh scripts/install-node.sh`"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI a missing node is a failure, not a skip)")
        pytest.skip(message)
    assert found is not None
    return found


def _env(url: str, nkey: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    return {**clean, "NATS_URL": url, "NATS_NKEY": str(nkey)}


@pytest.fixture(scope="module")
def locked_bus_with_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SecureLayout]]:
    """A nats-server locked by `gym-runner secure init`, and the weather environment, its
    agent and the offline policy served by three processes, each with its own role."""
    work = tmp_path_factory.mktemp("node")
    layout = secure_init(work / "secrets", [WEATHER], [], ["policy"])
    authorization = "authorization" + layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(work, size=1, extra=authorization) as servers:
        url = servers.url(0)
        creds = layout.credentials
        workers = [
            subprocess.Popen([sys.executable, "-m", "gymbus.runner", "serve", name], env=_env(url, creds[role]),
                             stdout=(work / f"{role}.log").open("wb"), stderr=subprocess.STDOUT)
            for name, role in ((WEATHER, f"env-{WEATHER}"), (WEATHER_AGENT, f"agent-{WEATHER_AGENT}"),
                               ("offline", "model-policy"))
        ]  # fmt: skip
        try:
            asyncio.run(_wait_served(url, creds["monitor"]))
            yield url, layout
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(30)


async def _wait_served(url: str, monitor: Path) -> None:
    nc = await bus.connect(url, name="test", auth=bus.BusAuth(nkey=monitor), role="monitor")
    try:
        await wait_served(nc, [WEATHER, WEATHER_AGENT, "policy"], timeout=90)
    finally:
        await nc.close()


def _producer(node: str, env: dict[str, str], out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [node, str(PRODUCER), "--input", str(EXAMPLE), "--output", str(out), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_node_producer_collects_rewarded_rollouts_on_a_locked_bus(
    node: str, locked_bus_with_workers: tuple[str, SecureLayout], tmp_path: Path
) -> None:
    url, layout = locked_bus_with_workers
    out = tmp_path / "rollouts.jsonl"
    done = _producer(node, _env(url, layout.credentials["runner"]), out,
                     "--agent", WEATHER_AGENT, "--num-repeats", "2", "--timeout", "90")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "wrote 10 of 10 rollouts" in done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tasks = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert sorted((row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows) == [
        (task, rollout) for task in range(5) for rollout in range(2)
    ]
    jsonschema = pytest.importorskip("jsonschema")
    rollout_schema = json.loads((schemas.SCHEMA_DIR / "rollout.schema.json").read_text())
    for row in rows:
        jsonschema.validate(row, rollout_schema)
        assert row["agent_ref"]["name"] == WEATHER_AGENT and "_ng_failure_class" not in row
        assert isinstance(row["reward"], float) and row["response"]["output"]
        # The task row came back with the rollout: its prompt, as the producer sent it.
        sent = tasks[row["_ng_task_index"]]["responses_create_params"]["input"]
        assert row["responses_create_params"]["input"] == sent
        assert row["_gymbus"]["delivery"] == 1


def test_with_the_producer_role_it_cannot_read_results_and_says_so(
    node: str, locked_bus_with_workers: tuple[str, SecureLayout], tmp_path: Path
) -> None:
    url, layout = locked_bus_with_workers
    done = _producer(node, _env(url, layout.credentials["producer"]), tmp_path / "out.jsonl",
                     "--agent", WEATHER_AGENT, "--timeout", "10")  # fmt: skip
    assert done.returncode == 1
    assert "permission" in done.stderr.lower() and "runner role" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
