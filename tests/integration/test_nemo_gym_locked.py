"""A hosted NeMo Gym server on a bus locked by `gym-runner secure init --nemo-gym`: its role
(`nemo-gym-<server>`) lets the worker serve the server's environment and the agents its
config declares (GymBus's simple agent, or NeMo Gym's own agent process behind its shims),
forward calls to the replica holding their session, send and read bodies too big for one
message by claim check, and nothing else.

Real NeMo Gym servers (the default release) in their own virtual environments (`sh scripts/install-nemo-gym.sh`
builds them; without them the test is skipped, except in CI, where that is a failure).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._cluster import NatsServers, tally
from gymbus import bus, schemas
from gymbus.functions.nemo_gym import locate, prepare
from gymbus.runner.security._secure import SecureLayout, secure_init

pytestmark = pytest.mark.timeout(600)

SERVER = "example_session_state_mgmt"  # keeps sessions in its process: calls are forwarded
AGENT = f"{SERVER}_simple_agent"
ROLE = f"nemo-gym-{SERVER}"
GYMNASIUM = "example_multi_turn_gymnasium"  # driven by NeMo Gym's own gymnasium_agent
GYMNASIUM_AGENT = f"{GYMNASIUM}_agent"
BIG_ROWS = 3
"""Rows of about 10 MB (over the 8 MB message limit): each goes by claim check."""


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServers, SecureLayout, Path]]:
    try:
        for server in (SERVER, GYMNASIUM):
            prepare(server)
        directory = locate(SERVER)[0]
    except schemas.GymError as exc:
        message = f"NeMo Gym servers unavailable (`sh scripts/install-nemo-gym.sh`): {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI this is a failure, not a skip)")
        pytest.skip(message)
    work = tmp_path_factory.mktemp("nemo-locked")
    hosted = [f"nemo-gym:{SERVER}", f"nemo-gym:{GYMNASIUM}"]
    layout = secure_init(work / "secrets", [], [], [], nemo_gym=hosted)
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
    assert {ROLE, f"nemo-gym-{GYMNASIUM}", "model-policy", "runner", "admin"} <= set(layout.credentials)
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


def _big_rows(directory: Path, target: Path) -> tuple[Path, set[tuple[int, int]]]:
    """The first `BIG_ROWS` of the Gymnasium server's example rows, each with a 10 MB
    conversation before its question (so every call of its agent to the policy is 10 MB)."""
    lines = (directory / "data" / "example.jsonl").read_text().splitlines()[:BIG_ROWS]
    history = [{"role": "user", "content": "y" * 100_000} for _ in range(100)]
    with open(target, "w") as out:
        for line in lines:
            row = json.loads(line)
            row["responses_create_params"]["input"] = history + row["responses_create_params"]["input"]
            out.write(json.dumps(row) + "\n")
    return target, {(task, 0) for task in range(len(lines))}


def test_a_hosted_nemo_gym_agent_collects_10_mb_rows_on_a_locked_bus(
    locked: tuple[NatsServers, SecureLayout, Path], tmp_path: Path
) -> None:
    servers, layout, _ = locked
    url, creds = servers.url(0), layout.credentials
    role = f"nemo-gym-{GYMNASIUM}"
    workers = [
        _serve(
            [f"nemo-gym:{GYMNASIUM}", "--concurrency", "4"], _env(url, creds[role]), tmp_path / "agent.log"
        ),
        _serve(["offline"], _env(url, creds["model-policy"]), tmp_path / "model.log"),
    ]
    try:
        _ready(workers[0], tmp_path / "agent.log")
        _ready(workers[1], tmp_path / "model.log")
        source, keys = _big_rows(locate(GYMNASIUM)[0], tmp_path / "big.jsonl")
        out = tmp_path / "out.jsonl"
        collect = subprocess.run(
            [sys.executable, "-m", "gymbus.runner", "collect", "-i", str(source), "-o", str(out),
             "--agent", GYMNASIUM_AGENT, "--concurrency", "2"],
            env=_env(url, creds["runner"]), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert collect.returncode == 0, collect.stderr[-3000:] + (tmp_path / "agent.log").read_text()[-3000:]
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(60)
    result = tally(out, keys)
    assert (result.written, result.lost, result.duplicated, result.failed) == (BIG_ROWS, 0, 0, 0), result
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # Each row went by claim check (task, the agent's policy calls, result) and came back
    # whole: its 10 MB conversation, then the episode NeMo Gym's agent played.
    assert all(len(json.dumps(row)) > 10_000_000 for row in rows)
    for row in rows:
        users = [item["content"] for item in row["response"]["output"] if item.get("role") == "user"]
        assert users == row["follow_ups"] and row["terminated"] is True
    refused = [line for line in servers.log(0).splitlines() if "Violation" in line]
    assert not refused  # the hosted server's role (its agent's shims too) had all it needed
