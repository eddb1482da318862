"""The workplace assistant through the real bus: its example rows collected with the offline
policy, session state in the KV bucket, bad calls answered with errors the model can read."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gymbus import bus, schemas
from gymbus.bus import Connection, ServeOptions, environment_service, serve_functions
from gymbus.bus.hosting import run_rollout
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.runner import CollectOptions, ProgressView, collect
from tests.conftest import EXAMPLES

WORKPLACE = "workplace_assistant"
AGENT = "workplace_assistant_simple_agent"


async def test_the_example_rows_collect_with_the_offline_policy(nats_url: str, tmp_path: Path) -> None:
    stop = asyncio.Event()
    workers = asyncio.create_task(
        serve_functions(ServeOptions(functions=(WORKPLACE, AGENT, "offline")), nats_url, stop)
    )
    try:
        await asyncio.sleep(0.5)
        out = tmp_path / "workplace.jsonl"
        options = CollectOptions(
            input=EXAMPLES / f"{WORKPLACE}.jsonl", output=out, agent=AGENT, nats_url=nats_url
        )
        result = await collect(options, ProgressView(), asyncio.Event())
    finally:
        stop.set()
        await workers
    assert (result.written, result.failed, result.planned) == (5, 0, 5)
    for row in (json.loads(line) for line in out.read_text().splitlines()):
        assert row["reward"] in (0.0, 1.0) and row["ground_truth"]
        outputs = [item for item in row["response"]["output"] if item["type"] == "function_call_output"]
        for output in outputs:  # a tool's answer, wrapped as NeMo Gym does
            assert set(json.loads(output["output"])) == {"output"}


@pytest.fixture
async def workplace(nc: Connection, host: bus.ServiceHost) -> bus.ServiceHost:
    """The workplace environment served on the test bus, its sessions in the KV bucket."""
    sessions = await bus.hosting.KvSessions.open(nc, WORKPLACE)
    await host.add(environment_service(ENVIRONMENTS[WORKPLACE], sessions, nc))
    return host


DELETE = {"name": "customer_relationship_manager_delete_customer", "arguments": '{"customer_id": "00000009"}'}


async def test_state_lives_on_the_bus_and_bad_calls_are_readable(
    nc: Connection, workplace: bus.ServiceHost
) -> None:
    calls = [
        DELETE,
        DELETE,
        {"name": DELETE["name"], "arguments": '{"customer_id": "00000010", "why": "spam"}'},
        {"name": "email_delete_email", "arguments": '["00000057"]'},
        {"name": "no_such_tool", "arguments": "{}"},
    ]
    row = {"responses_create_params": {"input": "Delete customer 00000009."}, "ground_truth": [DELETE]}
    outputs, reward = await scripted_rollout(nc, row, calls)
    assert outputs[0] == {"output": "Customer deleted successfully."}
    assert outputs[1] == {"output": "Customer not found."}  # the first call's change was kept on the bus
    assert outputs[2] == {
        "output": f"Error executing tool '{DELETE['name']}': "
        "CustomerRelationshipManagerTool.delete_customer() got an unexpected keyword argument 'why'"
    }
    assert "invalid arguments of tool email_delete_email" in outputs[3]["error"]
    assert outputs[4] == {"detail": "Not Found"}
    assert reward == 1.0


async def test_a_call_for_an_unseeded_session_is_refused(nc: Connection, workplace: bus.ServiceHost) -> None:
    subject = bus.subjects.env_tool(WORKPLACE, "email_delete_email")
    with pytest.raises(schemas.NotFound, match="Session not initialized. Please call seed_session first."):
        await bus.request(
            nc, subject, b'{"email_id": "00000057"}', timeout=5, headers={schemas.SESSION: "nobody"}
        )
    # the worker still serves
    with pytest.raises(schemas.NotFound):
        await bus.request(nc, subject, b"{}", timeout=5, headers={schemas.SESSION: "nobody"})


async def scripted_rollout(
    nc: Connection, row: dict[str, Any], calls: list[dict[str, str]]
) -> tuple[list[Any], float]:
    """One rollout over the bus in which a scripted policy makes `calls` at once, then stops:
    the tool outputs it got back, and the reward."""
    call_items = [{"type": "function_call", "call_id": f"c{i}", **call} for i, call in enumerate(calls)]
    turns = _turns([call_items, [{"type": "message", "role": "assistant", "content": "Done."}]])

    async def policy(data: bytes, headers: Mapping[str, str]) -> bytes:
        return json.dumps({"id": "r", "created_at": 0, "model": "scripted", "output": next(turns)}).encode()

    endpoint = bus.Endpoint("responses", bus.subjects.model_responses("scripted"), policy)
    host = bus.ServiceHost(nc)
    await host.add(bus.ServiceSpec("scripted", "model", (endpoint,)))
    try:
        agent = dataclasses.replace(AGENTS[AGENT], model="scripted")
        rollout = json.loads(
            await run_rollout(nc, agent, json.dumps(row).encode(), deadline=time.time() + 60)
        )
    finally:
        await host.stop()
    output = rollout["response"]["output"]
    return [json.loads(item["output"]) for item in output if item["type"] == "function_call_output"], rollout[
        "reward"
    ]


def _turns(turns: list[list[dict[str, Any]]]) -> Iterator[list[dict[str, Any]]]:
    yield from turns
