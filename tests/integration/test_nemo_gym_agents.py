"""NeMo Gym's own agents (`tool_simulation_agent`, `gymnasium_agent`), hosted unchanged on the
bus with the servers they drive (`serve nemo-gym:<server>`): collected as any GymBus agent,
their stored rollouts verified again, their rollouts on a real vLLM server trainable, and
no rollout lost when a worker or an agent process dies.

Real NeMo Gym servers and agents in their own virtual environments (`sh
scripts/install-nemo-gym.sh`), a real nats-server, real worker processes, a real vLLM server.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import psutil
import pytest

from bench._cluster import Cluster
from gymbus import bus
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.nemo_gym import VERSION_VARIABLE
from gymbus.runner import CollectOptions, VerifyOptions, collect, stitch, verify_rollouts
from gymbus.schemas import Item, Response, ResponsesCreateParams
from tests.integration.test_nemo_gym import (
    ALSO_ON,
    ROLES,
    SERVERS,
    built,
    launched_servers,
    quiet,
    start_worker,
)
from tests.vllm_server import MODEL_NAME, VllmServer

pytestmark = pytest.mark.timeout(900)

AGENT_DRIVEN = {server: agent for server, agent, role in ROLES if role == "agent"}
TOOL_SIMULATION = "single_step_tool_use_with_argument_comparison"
GYMNASIUM = "example_multi_turn_gymnasium"
REPEATS = 8
# The tiny random model, steered by the test vLLM server's regex logits processor
# (tests/vllm_steering.py), answers each turn in a few words.
STEER = r"It is (cold|sunny|rainy)\."


@pytest.fixture(scope="module")
def servers() -> dict[str, Path]:
    """The agent-driven servers' directories, their environments built (or found built)."""
    return built(AGENT_DRIVEN)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, ack_wait=3.0) as running:
        yield running


def rows_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def output_of(row: dict[str, object]) -> list[dict[str, object]]:
    response = row["response"]
    assert isinstance(response, dict)
    output = response["output"]
    assert isinstance(output, list)
    return output


async def verified(rollouts: Path, inputs: Path, agent: str, output: Path, url: str) -> tuple[int, int, int]:
    """(rows, agreed, failed) of verifying `rollouts` again, joined with `inputs`."""
    options = VerifyOptions(input=rollouts, inputs=inputs, agent=agent, output=output, nats_url=url)
    report = await verify_rollouts(options, quiet())
    return report.rows, report.agreed, report.failed


# --- both agents, end to end ---


async def test_agent_driven_servers_collect_their_example_rows_and_reverify_nemo_gyms_rollouts(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    worker = start_worker(
        cluster, f"nemo-gym:{TOOL_SIMULATION}", f"nemo-gym:{GYMNASIUM}", "offline", log="worker.log"
    )
    assert len(launched_servers(worker)) == 4  # two servers, two agents
    for server, agent in AGENT_DRIVEN.items():
        data = servers[server] / "data"
        # Their own example rows, collected end to end with the offline policy.
        output = tmp_path / f"{server}.jsonl"
        options = CollectOptions(
            input=data / "example.jsonl", output=output, agent=agent, nats_url=cluster.url
        )
        result = await collect(options, quiet(), asyncio.Event())
        assert (result.planned, result.written, result.failed) == (5, 5, 0), server
        rows = rows_of(output)
        assert sorted(row["_ng_task_index"] for row in rows) == list(range(5))  # type: ignore[type-var]
        assert all(row["agent_ref"] == {"type": "responses_api_agents", "name": agent} for row in rows)
        # NeMo Gym's stored rollouts verify again with its stored rewards...
        stored = await verified(
            data / "example_rollouts.jsonl", data / "example.jsonl", agent, tmp_path / f"{server}_stored.jsonl",
            cluster.url,
        )  # fmt: skip
        assert stored == (5, 5, 0), server
        # ...and so do the rollouts just collected, with the rewards the agent earned live.
        assert await verified(output, data / "example.jsonl", agent, tmp_path / f"{server}_again.jsonl",
                              cluster.url) == (5, 5, 0), server  # fmt: skip

    # The tool-simulation agent made one model call and its server judged the action.
    for row in rows_of(tmp_path / f"{TOOL_SIMULATION}.jsonl"):
        assert len(output_of(row)) == 1 and isinstance(row["category"], str) and row["reward"] in (0.0, 1.0)
    # The Gymnasium agent played each episode: every scripted follow-up reached the model
    # as a user turn, answered by the model, and the row's own fields stayed on it.
    for row in rows_of(tmp_path / f"{GYMNASIUM}.jsonl"):
        follow_ups = row["follow_ups"]
        assert isinstance(follow_ups, list) and row["terminated"] is True
        users = [item["content"] for item in output_of(row) if item.get("role") == "user"]
        assistants = [item for item in output_of(row) if item.get("role") == "assistant"]
        assert users == follow_ups and len(assistants) == len(follow_ups) + 1
        assert "gymbus_rollout" not in json.dumps(row)  # the bridge's tag never reaches a row


async def test_a_gymnasium_rollout_is_verified_by_replaying_its_episode(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    start_worker(cluster, f"nemo-gym:{GYMNASIUM}", log="worker.log")
    data = servers[GYMNASIUM] / "data"
    # A stored rollout whose last answer no longer has the expected answer: replayed, it earns 0.
    first = json.loads(data.joinpath("example_rollouts.jsonl").read_text().splitlines()[0])
    last = next(item for item in reversed(output_of(first)) if item.get("role") == "assistant")
    last["content"] = [{"type": "output_text", "text": "I do not know.", "annotations": []}]
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps(first) + "\n")
    options = VerifyOptions(
        input=changed, inputs=data / "example.jsonl", agent=AGENT_DRIVEN[GYMNASIUM],
        output=tmp_path / "changed_out.jsonl", nats_url=cluster.url,
    )  # fmt: skip
    report = await verify_rollouts(options, quiet())
    assert (report.rows, report.failed, len(report.disagreements)) == (1, 0, 1)
    replayed = json.loads(options.output.read_text())
    assert (replayed["reward"], replayed["terminated"], first["reward"]) == (0.0, True, 1.0)


# --- the previous release, chosen by a setting ---

OLD_RELEASE = "0.4.0"
ON_OLD_RELEASE = {server: SERVERS[server] for server, releases in ALSO_ON.items() if OLD_RELEASE in releases}
"""What the tests run on 0.4.0 too: its agents, and a server of GymBus's own simple agent."""


async def test_the_previous_release_still_runs_its_servers_and_agents(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VERSION_VARIABLE, OLD_RELEASE)
    directories = built(ON_OLD_RELEASE)
    site_packages = {path.parent.parent for path in directories.values()}
    assert all((path / f"nemo_gym-{OLD_RELEASE}.dist-info").is_dir() for path in site_packages)
    start_worker(cluster, *(f"nemo-gym:{server}" for server in ON_OLD_RELEASE), "offline", log="old.log",
                 **{VERSION_VARIABLE: OLD_RELEASE})  # fmt: skip
    for server, agent in ON_OLD_RELEASE.items():
        data = directories[server] / "data"
        output = tmp_path / f"{server}.jsonl"
        options = CollectOptions(
            input=data / "example.jsonl", output=output, agent=agent, nats_url=cluster.url
        )
        result = await collect(options, quiet(), asyncio.Event())
        assert (result.planned, result.written, result.failed) == (5, 5, 0), server
        stored = await verified(
            data / "example_rollouts.jsonl", data / "example.jsonl", agent, tmp_path / f"{server}_stored.jsonl",
            cluster.url,
        )  # fmt: skip
        assert stored == (5, 5, 0), server


# --- a real vLLM server behind a hosted agent ---


def steered_rows(source: Path, target: Path) -> Path:
    with open(target, "w") as out:
        for row in rows_of(source):
            params = row["responses_create_params"]
            assert isinstance(params, dict)
            params["metadata"] = {"extra_body": json.dumps({"vllm_xargs": {"gymbus_regex": STEER}})}
            out.write(json.dumps(row) + "\n")
    return target


async def test_a_hosted_agents_rollouts_on_vllm_carry_contiguous_token_ids(
    servers: dict[str, Path], cluster: Cluster, vllm_server: VllmServer, tmp_path: Path
) -> None:
    start_worker(cluster, f"nemo-gym:{GYMNASIUM}", log="agent.log")
    start_worker(cluster, "vllm", "--model-url", vllm_server.url, "--model", MODEL_NAME, log="vllm.log")
    rows_in = steered_rows(servers[GYMNASIUM] / "data" / "example.jsonl", tmp_path / "steered.jsonl")
    output = tmp_path / "vllm.jsonl"
    options = CollectOptions(
        input=rows_in, output=output, agent=AGENT_DRIVEN[GYMNASIUM], nats_url=cluster.url
    )
    result = await collect(options, quiet(), asyncio.Event())
    assert (result.planned, result.written, result.failed) == (5, 5, 0)
    for row in rows_of(output):
        items = msgspec.json.decode(json.dumps(output_of(row)), type=list[Item])
        sequence = stitch(items)  # raises if a later call's prompt does not extend the one before
        follow_ups = row["follow_ups"]
        assert isinstance(follow_ups, list) and sequence.num_turns == len(follow_ups) + 1
        # The follow-ups reached the model between its turns: tokens it did not generate.
        assert sequence.env_mask.count(0) > 0 and sequence.env_mask[-1] == 1
        generated = [lp for lp, mask in zip(sequence.logprobs, sequence.env_mask, strict=True) if mask]
        assert generated and all(lp <= 0.0 for lp in generated)
        answers = [item for item in items if item.role == "assistant"]
        assert all(isinstance(item.generation_token_ids, list) for item in answers)


# --- a worker killed mid-collection ---


async def slow_policy(params: ResponsesCreateParams) -> Response:
    """The offline policy, slowed so that rollouts are in flight when a worker dies."""
    await asyncio.sleep(0.3)
    return await offline_policy(params)


@pytest.fixture
async def slow_model(cluster: Cluster) -> AsyncIterator[None]:
    nc = await bus.connect(cluster.url, name="slow policy")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("slow", "policy", slow_policy))
    yield
    await host.stop()
    await nc.close()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def agent_processes(worker: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The hosted NeMo Gym agent processes among a worker's children."""
    children = psutil.Process(worker.pid).children(recursive=True)
    return [child for child in children if "responses_api_agents" in " ".join(child.cmdline())]


def keys_of(output: Path) -> list[tuple[int, int]]:
    return sorted((row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows_of(output))  # type: ignore[misc]


async def test_killing_a_hosted_agents_worker_mid_collection_loses_no_rollout(
    servers: dict[str, Path], cluster: Cluster, slow_model: None, tmp_path: Path
) -> None:
    workers = [
        start_worker(cluster, f"nemo-gym:{GYMNASIUM}", log=f"w{n}.log", concurrency=4) for n in range(2)
    ]
    planned = 5 * REPEATS
    output = tmp_path / "episodes.jsonl"
    options = CollectOptions(
        input=servers[GYMNASIUM] / "data" / "example.jsonl", output=output, agent=AGENT_DRIVEN[GYMNASIUM],
        num_repeats=REPEATS, nats_url=cluster.url,
    )  # fmt: skip
    collection = asyncio.create_task(collect(options, quiet(), asyncio.Event()))
    while _lines(output) < planned // 4:
        assert not collection.done(), collection
        await asyncio.sleep(0.05)
    victim = workers[0]
    its_processes = launched_servers(victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    written_at_kill = _lines(output)
    result = await asyncio.wait_for(collection, 300)

    assert written_at_kill <= planned // 2  # the kill landed while most rollouts were left
    assert (
        len(its_processes) == 2 and psutil.wait_procs(its_processes, timeout=10)[1] == []
    )  # server and agent died with it
    assert (result.planned, result.written, result.failed) == (planned, planned, 0)
    assert keys_of(output) == [
        (task, k) for task in range(5) for k in range(REPEATS)
    ]  # none lost, none twice
    ran = [row["_gymbus"] for row in rows_of(output)]
    logs = "\n".join((cluster.workdir / f"w{n}.log").read_text(errors="replace")[-3000:] for n in range(2))
    # The killed worker's rollouts ran again elsewhere.
    assert max(stats["delivery"] for stats in ran) > 1, f"{written_at_kill} rows at the kill; {ran}\n{logs}"  # type: ignore[index]
    assert workers[1].poll() is None


async def test_a_dead_agent_process_stops_its_worker_and_its_rollouts_run_elsewhere(
    servers: dict[str, Path], cluster: Cluster, slow_model: None, tmp_path: Path
) -> None:
    first = start_worker(cluster, f"nemo-gym:{GYMNASIUM}", log="first.log", concurrency=4)
    planned = 5 * REPEATS
    output = tmp_path / "episodes.jsonl"
    options = CollectOptions(
        input=servers[GYMNASIUM] / "data" / "example.jsonl", output=output, agent=AGENT_DRIVEN[GYMNASIUM],
        num_repeats=REPEATS, nats_url=cluster.url,
    )  # fmt: skip
    collection = asyncio.create_task(collect(options, quiet(), asyncio.Event()))
    while _lines(output) < planned // 4:
        assert not collection.done(), collection
        await asyncio.sleep(0.05)
    (agent,) = agent_processes(first)
    agent.kill()
    assert await asyncio.to_thread(first.wait, 60) == 1
    said = " ".join((cluster.workdir / "first.log").read_text().split())
    assert f"NeMo Gym agent {AGENT_DRIVEN[GYMNASIUM]} exited with code -9; its log is" in said
    start_worker(cluster, f"nemo-gym:{GYMNASIUM}", log="second.log", concurrency=4)
    result = await asyncio.wait_for(collection, 300)
    assert (result.planned, result.written, result.failed) == (planned, planned, 0)
    assert keys_of(output) == [(task, k) for task in range(5) for k in range(REPEATS)]
