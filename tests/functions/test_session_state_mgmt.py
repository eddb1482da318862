"""`example_session_state_mgmt`: a counter seeded per session, changed by tools, verified at the end."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gymbus import bus, schemas
from gymbus.functions import MemoryState, ModelFunction, Session
from gymbus.functions.agents.simple_agent import simple_agent
from gymbus.functions.environments.example_session_state_mgmt import (
    CounterSeedRequest,
    CounterVerifyRequest,
    IncrementCounter,
    NoArguments,
    get_counter_value,
    increment_counter,
)
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import ResponsesCreateParams
from tests.conftest import EXAMPLES
from tests.functions.local_calls import LocalCalls, scripted

ENV = ENVIRONMENTS["example_session_state_mgmt"]
ROW = json.loads((EXAMPLES / "example_session_state_mgmt.jsonl").read_text().splitlines()[0])
PROMPT = ResponsesCreateParams(input="add 3 then get the count")


def solution() -> ModelFunction:
    """A hand-written policy for ROW ("add 1 then add 2 then get the count"), one call a turn."""
    add = "increment_counter"
    return scripted([(add, '{"count": 1}')], [(add, '{"count": 2}')], [("get_counter_value", "{}")], "6")


async def seeded(initial_count: int = 3, state: MemoryState | None = None, session: str = "s1") -> Session:
    here = Session(id=session, state=state if state is not None else MemoryState())
    assert ENV.seed is not None
    await ENV.seed(CounterSeedRequest(responses_create_params=PROMPT, initial_count=initial_count), here)
    return here


async def count(session: Session) -> int:
    return (await get_counter_value(NoArguments(), session)).count


async def verify(session: Session, output: list[dict[str, Any]] | None = None, **row: Any) -> dict[str, Any]:
    body = {**ROW, **row, "response": {"id": "r", "created_at": 0, "model": "m", "output": output or []}}
    request = bus.wire.decode(json.dumps(body).encode(), CounterVerifyRequest)
    return msgspec.to_builtins(await ENV.verify(request, session))  # type: ignore[no-any-return]


def called(name: str, arguments: str, answer: Any, call_id: str) -> list[dict[str, Any]]:
    """One tool call of a stored rollout and the output the tool gave it."""
    return [
        {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id},
        {"type": "function_call_output", "call_id": call_id, "output": json.dumps(answer)},
    ]


def history(*counts: int) -> list[dict[str, Any]]:
    """A stored rollout's output: `increment_counter` by each of `counts`, then a read."""
    output = [
        item
        for n, count in enumerate(counts)
        for item in called("increment_counter", json.dumps({"count": count}), {"success": True}, f"c{n}")
    ]
    return output + called("get_counter_value", "{}", {"count": 3 + sum(counts)}, "read")


async def test_seed_increment_and_get() -> None:
    session = await seeded(3)
    assert await count(session) == 3
    assert msgspec.to_builtins(await increment_counter(IncrementCounter(count=1), session)) == {
        "success": True
    }
    await increment_counter(IncrementCounter(count=2), session)
    assert await count(session) == 6
    await increment_counter(IncrementCounter(count=-10), session)
    assert await count(session) == -4


async def test_sessions_do_not_share_counters() -> None:
    state = MemoryState()
    first, second = await seeded(3, state, "a"), await seeded(100, state, "b")
    await increment_counter(IncrementCounter(count=1), first)
    assert (await count(first), await count(second)) == (4, 100)


async def test_seeding_again_keeps_the_counter() -> None:
    state = MemoryState()
    session = await seeded(3, state)
    await increment_counter(IncrementCounter(count=2), session)
    await seeded(50, state, session.id)
    assert await count(session) == 5


async def test_tools_of_an_unseeded_session_are_not_found() -> None:
    state = MemoryState()
    session = Session(id="never-seeded", state=state)
    with pytest.raises(schemas.NotFound, match="never seeded, or it expired"):
        await increment_counter(IncrementCounter(count=1), session)
    with pytest.raises(schemas.NotFound, match="never seeded, or it expired"):
        await get_counter_value(NoArguments(), session)
    assert state.values == {}  # no counter was started for it


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (b"{}", "missing required field `count`"),
        (b'{"count": "2"}', "Expected `int`, got `str`"),
        (b'{"count": 1.5}', "Expected `int`, got `float`"),
    ],
)
def test_wrong_arguments_are_a_readable_bad_request(arguments: bytes, message: str) -> None:
    with pytest.raises(schemas.BadRequest, match=message):
        bus.wire.decode(arguments, ENV.tools[0].args_type, "arguments of tool increment_counter")


def test_a_row_without_an_integer_initial_count_cannot_be_seeded() -> None:
    with pytest.raises(schemas.BadRequest, match="initial_count"):
        bus.wire.decode(b'{"responses_create_params": {"input": "hi"}}', ENV.seed_request, "seed request")
    with pytest.raises(schemas.BadRequest, match="initial_count"):
        bus.wire.decode(
            b'{"responses_create_params": {"input": "hi"}, "initial_count": "3"}', ENV.seed_request
        )


async def test_reward_is_whether_the_counter_equals_the_expected_count() -> None:
    session = await seeded(3)
    assert await verify(session) == {"reward": 0.0}  # expected 6, counter 3
    await increment_counter(IncrementCounter(count=3), session)
    assert await verify(session) == {"reward": 1.0}
    await increment_counter(IncrementCounter(count=1), session)
    assert await verify(session) == {"reward": 0.0}


# A session without a counter (how `gym-runner verify` re-scores a stored rollout): the replay.


@pytest.mark.parametrize(
    ("counts", "reward"),
    [((1, 2), 1.0), ((3,), 1.0), ((1, 1), 0.0), ((), 0.0), ((1, 2, 1), 0.0), ((10, -7), 1.0)],
)
async def test_a_stored_rollout_without_its_session_is_scored_by_replaying_its_calls(
    counts: tuple[int, ...], reward: float
) -> None:
    assert await verify(Session(id="fresh"), history(*counts)) == {"reward": reward}  # 3 + counts vs 6


async def test_a_live_counter_wins_over_the_replay() -> None:
    session = await seeded(6)  # the counter says 6, the rollout's calls say 3 + 1
    assert await verify(session, history(1)) == {"reward": 1.0}
    assert await verify(await seeded(3, session="other"), history(1, 2)) == {"reward": 0.0}


async def test_calls_the_tool_refused_count_for_nothing_in_the_replay() -> None:
    refused = {"error": "session 's' has no counter: it was never seeded, or it expired"}
    output = [
        *called("increment_counter", '{"count": 3}', refused, "a"),
        *called("increment_counter", '{"count": "3"}', {"error": "Expected `int`, got `str`"}, "b"),
        *called("increment_counter", '{"count": 3}', {"success": False}, "c"),
        {"type": "function_call", "name": "increment_counter", "arguments": '{"count": 3}', "call_id": "d"},
        *called("get_counter_value", '{"count": 3}', {"count": 3}, "e"),
    ]  # the call "d" never got an answer: the rollout ended before it ran
    assert await verify(Session(id="fresh"), output) == {"reward": 0.0}
    output += called("increment_counter", '{"count": 3}', {"success": True}, "f")
    assert await verify(Session(id="fresh"), output) == {"reward": 1.0}


async def test_a_rollout_collected_earlier_reproduces_its_reward_in_a_fresh_session() -> None:
    calls = LocalCalls(ENV, session="gone", policy=solution())
    rollout = json.loads(await simple_agent(json.dumps(ROW).encode(), calls, 8))
    assert rollout["reward"] == 1.0
    request = bus.wire.decode(json.dumps(rollout).encode(), CounterVerifyRequest)
    assert (await ENV.verify(request, Session(id="re-verify"))).reward == 1.0


@pytest.mark.parametrize("initial_count", [None, "3", True])
async def test_no_counter_and_no_integer_initial_count_is_an_unknown_session(initial_count: Any) -> None:
    verdict = {"reward": 0.0, "error_type": "unknown_session"}
    assert await verify(Session(id="never-seeded"), history(1, 2), initial_count=initial_count) == verdict


@pytest.mark.parametrize(
    ("expected", "error_type"),
    [(None, "invalid_expected_count"), ("6", "invalid_expected_count"), (True, "invalid_expected_count")],
)
async def test_a_bad_expected_count_earns_zero_with_a_reason(expected: Any, error_type: str) -> None:
    session = await seeded(6)
    assert await verify(session, expected_count=expected) == {"reward": 0.0, "error_type": error_type}


async def test_a_row_without_expected_count_earns_zero_with_a_reason() -> None:
    body = {k: v for k, v in ROW.items() if k != "expected_count"}
    body["response"] = {"id": "r", "created_at": 0, "model": "m", "output": []}
    request = bus.wire.decode(json.dumps(body).encode(), CounterVerifyRequest)
    result = await ENV.verify(request, await seeded(6))
    assert (result.reward, result.error_type) == (0.0, "missing_expected_count")


async def test_a_rollout_of_an_unseeded_session_goes_on_and_earns_zero() -> None:
    calls = LocalCalls(ENV, session="lost", policy=solution())

    async def forget(row: bytes) -> None:  # the seed never happened (or its state expired)
        return None

    calls.seed = forget  # type: ignore[method-assign]
    rollout = json.loads(await simple_agent(json.dumps(ROW).encode(), calls, 8))
    outputs = [item for item in rollout["response"]["output"] if item["type"] == "function_call_output"]
    assert len(outputs) == 3 and all("never seeded" in json.loads(o["output"])["error"] for o in outputs)
    assert rollout["response"]["output"][-1]["type"] == "message"
    assert rollout["reward"] == 0.0 and "error_type" not in rollout  # no increment took: 3, not 6
