"""A hosted NeMo Gym server on a bus locked by `gym-runner secure init --nemo-gym`: its role
(`nemo-gym-<server>`) lets the worker serve the server's environment and the agents its
config declares, forward calls to the replica holding their session, and nothing else.

Real NeMo Gym 0.4.0 servers in their own virtual environments (`sh scripts/install-nemo-gym.sh`
builds them; without them the test is skipped, except in CI, where that is a failure).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbus import bus
from gymbus import schemas
from bench._cluster import NatsServers, tally
from gymbus.functions.nemo_gym import locate, prepare
from gymbus.runner.security._secure import SecureLayout, secure_init

pytestmark = pytest.mark.timeout(600)

SERVER = "example_session_state_mgmt"  # keeps sessions in its process: calls are forwarded
AGENT = f"{SERVER}_simple_agent"
ROLE = f"nemo-gym-{SERVER}"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServers, SecureLayout, Path]]:
    try:
        prepare(SERVER)
        directory = locate(SERVER)[0]
    except schemas.GymError as exc:
        message = f"NeMo Gym servers unavailable (`sh scripts/install-nemo-gym.sh`): {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI this is a failure, not a skip)")
        pytest.skip(message)
    work = tmp_path_factory.mktemp("nemo-locked")
    layout = secure_init(work / "secrets", [], [], [], nemo_gym=[f"nemo-gym:{SERVER}"])
    authorization = layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(work, size=1, extra="authorization" + authorization) as servers:
        yield servers, layout, directory


def _env(url: str, nkey: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    return {**clean, "NATS_URL": url, "NATS_NKEY": str(nkey)}


def _serve(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "gymbus.runner", "serve", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip


def _ready(process: subprocess.Popen[bytes], log: Path, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while "ready: serving" not in log.read_text(errors="replace"):
        assert process.poll() is None, f"worker exited:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"worker not ready:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)


def test_secure_init_names_the_servers_role_with_its_agents_and_models(
    locked: tuple[NatsServers, SecureLayout, Path],
) -> None:
    _, layout, _ = locked
    assert {ROLE, "model-policy", "runner", "admin"} <= set(layout.credentials)
    assert not [role for role in layout.credentials if role.startswith(("env-", "agent-"))]
    with pytest.raises(ValueError, match="NeMo Gym server nemo-gym:no_such_server"):
        secure_init(layout.config.parent.parent / "other", [], [], [], nemo_gym=["nemo-gym:no_such_server"])


def test_a_hosted_server_and_its_agent_collect_on_a_locked_bus(
    locked: tuple[NatsServers, SecureLayout, Path], tmp_path: Path
) -> None:
    servers, layout, directory = locked
    url, creds = servers.url(0), layout.credentials
    # Two replicas: a call reaching the one that did not seed its session is forwarded.
    workers = [_serve([f"nemo-gym:{SERVER}", "--concurrency", "8"], _env(url, creds[ROLE]), tmp_path / f"r{n}.log")
               for n in range(2)]  # fmt: skip
    workers.append(_serve(["offline"], _env(url, creds["model-policy"]), tmp_path / "model.log"))
    try:
        for n, worker in enumerate(workers):
            _ready(worker, tmp_path / ("model.log" if n == 2 else f"r{n}.log"))
        out = tmp_path / "out.jsonl"
        rows = directory / "data" / "example.jsonl"
        collect = subprocess.run(
            [sys.executable, "-m", "gymbus.runner", "collect", "-i", str(rows), "-o", str(out),
             "--agent", AGENT, "--num-repeats", "8", "--concurrency", "16"],
            env=_env(url, creds["runner"]), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert collect.returncode == 0, collect.stderr[-3000:]
        forwarded = asyncio.run(_forwarded(url, creds["monitor"]))
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(60)
    keys = {(task, rollout) for task in range(len(rows.read_text().splitlines())) for rollout in range(8)}
    result = tally(out, keys)
    assert (result.lost, result.duplicated, result.failed) == (0, 0, 0), result
    assert forwarded > 0  # the replicas' own subjects were used: the role may forward
    refused = [line for line in servers.log(0).splitlines() if "Violation" in line]
    assert not refused  # the server's role had all it needed


async def _forwarded(url: str, monitor: Path) -> int:
    """Calls the replicas took on their own subjects (`tool@<replica>`, `verify@<replica>`)."""
    nc = await bus.connect(url, name="monitor", auth=bus.BusAuth(nkey=monitor), role="monitor")
    try:
        stats = await bus.service_stats(nc, SERVER)
    finally:
        await nc.close()
    return sum(endpoint.num_requests for one in stats for endpoint in one.endpoints if "@" in endpoint.name)
