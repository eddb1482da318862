"""Tests of `shopping_list`: its functions called directly (they know nothing of the bus), then
GymBus's conformance check on it, as a worker serves it (`gym-runner check`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from shopping_list.environment import (
    ENVIRONMENT,
    AddItem,
    ListSeedRequest,
    ListVerifyRequest,
    NoArguments,
    add_item,
    list_items,
    seed,
    verify,
)

from gymbus.functions import BadRequest, MemoryState, Session

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "data" / "example.jsonl"
ENVIRONMENT_FILE = ROOT / "shopping_list" / "environment.py"


def first_row() -> dict:
    return msgspec.json.decode(EXAMPLES.read_bytes().splitlines()[0])


async def a_rollout(items: list[str], fresh_session_to_verify: bool = False) -> float:
    """Seed a session, add `items` with the tool, and verify the response those tool calls
    made against the first example row (in a fresh session, as `gym-runner verify` does,
    if `fresh_session_to_verify`)."""
    session = Session(id="s1", state=MemoryState())
    row = first_row()
    await seed(msgspec.convert(row, ListSeedRequest), session)
    outputs = []
    for item in items:
        shown = await add_item(AddItem(item=item), session)
        shown_json = msgspec.json.encode(shown).decode()
        outputs.append({"type": "function_call_output", "call_id": item, "output": shown_json})
    assert (await list_items(NoArguments(), session)).items == items
    response = {"id": "r", "created_at": 0, "model": "m", "output": outputs}
    request = msgspec.convert({**row, "response": response}, ListVerifyRequest)
    if fresh_session_to_verify:
        session = Session(id="s2", state=MemoryState())
    return (await verify(request, session)).reward


def test_the_right_items_earn_the_reward() -> None:
    assert asyncio.run(a_rollout(["Eggs", "milk"])) == 1.0
    assert asyncio.run(a_rollout(["milk"])) == 0.0


def test_a_stored_rollout_re_verifies_to_the_same_reward_without_its_session() -> None:
    assert asyncio.run(a_rollout(["Eggs", "milk"], fresh_session_to_verify=True)) == 1.0
    assert asyncio.run(a_rollout(["milk"], fresh_session_to_verify=True)) == 0.0


def test_an_empty_item_is_refused_with_a_message_the_model_reads() -> None:
    session = Session(id="s2", state=MemoryState())
    with pytest.raises(BadRequest, match="must not be empty"):
        asyncio.run(add_item(AddItem(item="  "), session))


def test_every_example_row_names_this_environments_agent() -> None:
    rows = [msgspec.json.decode(line) for line in EXAMPLES.read_bytes().splitlines()]
    assert rows and {row["agent_ref"]["name"] for row in rows} == set(ENVIRONMENT.agents)


def test_the_conformance_check_passes_on_a_worker_serving_it() -> None:
    # Starts a nats-server and a worker serving the environment, seeds, calls each tool,
    # verifies; exits 0 only if every item passed.
    check = subprocess.run(
        [sys.executable, "-m", "gymbus.runner", "check", str(ENVIRONMENT_FILE), "--input", str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "all" in check.stderr + check.stdout and "checks passed" in check.stderr + check.stdout
