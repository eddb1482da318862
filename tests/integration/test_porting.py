"""The porting guide's example (docs/porting.md): NeMo Gym's `example_session_state_mgmt`,
hosted unchanged through the bridge, and its GymBus port (examples/porting/stateful_counter.py,
served from its file) give the same rollouts the same rewards, on NeMo Gym's own rows.

Both are driven by the same deterministic scripted policy (what the rows ask: each increment,
then a read), on NeMo Gym's five example rows and on five copies expecting one more than that,
so both rewards occur.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bench._cluster import Cluster
from gymbus import bus
from gymbus.runner.collection._collect import CollectOptions, collect
from tests.integration.test_nemo_gym import SERVERS, STATEFUL, built, counting_policy, quiet, start_worker

pytestmark = pytest.mark.timeout(600)

PORT = Path(__file__).resolve().parents[2] / "examples" / "porting" / "stateful_counter.py"
PORT_AGENT = "stateful_counter_simple_agent"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, ack_wait=3.0) as running:
        yield running


@pytest.fixture
async def counting_model(cluster: Cluster) -> AsyncIterator[None]:
    nc = await bus.connect(cluster.url, name="counting policy")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("counting", "policy", counting_policy))
    yield
    await host.stop()
    await nc.close()


def _rows(server_dir: Path, out: Path) -> Path:
    rows = [json.loads(line) for line in (server_dir / "data" / "example.jsonl").read_text().splitlines()]
    missed = [{**row, "expected_count": row["expected_count"] + 1} for row in rows]
    out.write_text("".join(json.dumps(row) + "\n" for row in rows + missed))
    return out


def _outcomes(path: Path) -> list[tuple[int, float, list[object]]]:
    """Per task: its reward and the tool outputs the model read, in order."""
    found = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        outputs = [
            json.loads(i["output"]) for i in row["response"]["output"] if i["type"] == "function_call_output"
        ]
        found.append((row["_ng_task_index"], row["reward"], outputs))
    return sorted(found, key=lambda outcome: outcome[0])


async def test_nemo_gyms_server_and_its_port_give_equal_rewards_on_the_same_rows(
    cluster: Cluster, counting_model: None, tmp_path: Path
) -> None:
    server_dir = built([STATEFUL])[STATEFUL]
    rows = _rows(server_dir, tmp_path / "rows.jsonl")
    start_worker(cluster, f"nemo-gym:{STATEFUL}", log="nemo-gym.log")
    start_worker(cluster, str(PORT), log="port.log")
    outcomes = {}
    for agent in (SERVERS[STATEFUL], PORT_AGENT):
        output = tmp_path / f"{agent}.jsonl"
        options = CollectOptions(input=rows, output=output, agent=agent, nats_url=cluster.url)
        result = await collect(options, quiet(), asyncio.Event())
        assert (result.written, result.failed) == (10, 0), agent
        outcomes[agent] = _outcomes(output)
    assert outcomes[PORT_AGENT] == outcomes[SERVERS[STATEFUL]]
    assert sorted(reward for _, reward, _ in outcomes[PORT_AGENT]) == [0.0] * 5 + [1.0] * 5
