"""The multi-turn agent's loop, with scripted policy and user simulator: no bus needed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from gymbus import schemas
from gymbus.functions import Session
from gymbus.functions.agents.multi_turn_agent import (
    DEFAULT_MAX_USER_TURNS,
    SIMULATOR_PREAMBLE,
    STOP_MARKER,
    USER_SIMULATOR,
    multi_turn_agent,
)
from gymbus.functions.environments.example_multi_turn import (
    GetWeather,
    MultiTurnVerifyRequest,
    get_weather,
    verify,
)
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.registry import AGENT_KINDS, AGENTS, ENVIRONMENTS
from gymbus.schemas import (
    ContentPart,
    IncompleteDetails,
    Item,
    Response,
    ResponsesCreateParams,
    Usage,
    item_text,
)
from tests.conftest import EXAMPLES

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def task(**fields: Any) -> bytes:
    row = {
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
            ],
            "tools": [TOOL],
        },
        "user_persona": "A terse traveller.",
        "user_goal": "Learn the weather in Paris and Tokyo.",
        "expected_cities": ["Paris", "Tokyo"],
        **fields,
    }
    return json.dumps(row).encode()


def message(text: str, tokens: int = 1) -> Response:
    item = Item(type="message", role="assistant", content=[ContentPart(type="output_text", text=text)])
    usage = Usage(input_tokens=tokens, output_tokens=tokens, total_tokens=2 * tokens)
    return Response(id="r", created_at=0, model="m", output=[item], usage=usage)


def call(city: str) -> Response:
    item = Item(
        type="function_call", name="get_weather", arguments=json.dumps({"city": city}), call_id=f"c_{city}"
    )
    return Response(id="r", created_at=0, model="m", output=[item])


@dataclass
class FakeCalls:
    """`Calls` with scripted policy and simulator replies, recording every request."""

    policy: list[Response] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    policy_requests: list[ResponsesCreateParams] = field(default_factory=list)
    user_requests: list[ResponsesCreateParams] = field(default_factory=list)
    verified: list[dict[str, Any]] = field(default_factory=list)
    user_fails: bool = False

    async def seed(self, row: bytes) -> bytes:
        return b"{}"

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
        if model == USER_SIMULATOR:
            self.user_requests.append(params)
            if self.user_fails:
                raise schemas.NoResponders("nobody serves it", subject="gym.model.user_simulator.responses")
            return message(self.user.pop(0)) if self.user else await offline_policy(params)
        assert model is None
        self.policy_requests.append(params)
        return self.policy.pop(0) if self.policy else await offline_policy(params)

    async def tool(self, name: str, arguments: str) -> str:
        weather = await get_weather(GetWeather(**json.loads(arguments)), Session(id="s"))
        return json.dumps({"weather_description": weather.weather_description})

    async def verify(self, row: bytes, response: Response) -> bytes:
        body = json.loads(row) | {"response": msgspec.to_builtins(response)}
        self.verified.append(body)
        request = msgspec.json.decode(json.dumps(body), type=MultiTurnVerifyRequest)
        return msgspec.json.encode(await verify(request, Session(id="s")))


def conversation(row: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind or role, text or arguments) of every output item."""
    out = []
    for item in row["response"]["output"]:
        if item["type"] == "message":
            out.append((item["role"], "".join(part["text"] for part in item["content"])))
        else:
            out.append((item["type"], item.get("arguments") or item.get("output")))
    return out


async def test_the_stop_marker_ends_the_conversation_and_user_turns_sit_between_policy_turns() -> None:
    calls = FakeCalls(
        policy=[call("Paris"), message("Paris is sunny."), call("Tokyo"), message("Tokyo is rainy.")],
        user=["And Tokyo?", f"Thanks! {STOP_MARKER}"],
    )
    row = json.loads(await multi_turn_agent(task(), calls, 8))
    assert [kind for kind, _ in conversation(row)] == [
        "function_call", "function_call_output", "assistant", "user",
        "function_call", "function_call_output", "assistant",
    ]  # fmt: skip
    assert conversation(row)[3] == ("user", "And Tokyo?")
    assert row["response"]["output"][3]["content"][0]["type"] == "input_text"
    assert (row["simulated_user_turns"], row["user_goal_met"]) == (1, True)
    assert row["reward"] == 1.0 and row["missing_cities"] == []
    # The second policy turn saw the prompt, the first turn and the user's message.
    second = calls.policy_requests[2].input
    assert isinstance(second, list) and len(second) == 2 + 4
    assert item_text(second[-1]) == "And Tokyo?"


async def test_verify_sees_the_whole_conversation() -> None:
    calls = FakeCalls(
        policy=[call("Paris"), message("sunny"), call("Tokyo"), message("rainy")], user=["Tokyo?"]
    )
    await multi_turn_agent(task(max_user_turns=1), calls, 8)
    [seen] = calls.verified
    assert [item.get("role", item["type"]) for item in seen["response"]["output"]] == [
        "function_call", "function_call_output", "assistant", "user",
        "function_call", "function_call_output", "assistant",
    ]  # fmt: skip
    assert seen["user_goal"] == "Learn the weather in Paris and Tokyo."  # the row passes through


async def test_the_turn_limit_bounds_the_user_messages() -> None:
    calls = FakeCalls(
        policy=[message(f"reply {i}") for i in range(10)], user=[f"more {i}" for i in range(10)]
    )
    row = json.loads(await multi_turn_agent(task(max_user_turns=3), calls, 8))
    assert [text for role, text in conversation(row) if role == "user"] == ["more 0", "more 1", "more 2"]
    assert (row["simulated_user_turns"], row["user_goal_met"]) == (3, False)
    assert len(calls.user_requests) == 3 and len(calls.policy_requests) == 4
    assert conversation(row)[-1] == ("assistant", "reply 3")  # the policy has the last word


async def test_without_max_user_turns_the_default_limit_applies() -> None:
    calls = FakeCalls(policy=[message("r")] * 20, user=["go on"] * 20)
    row = json.loads(await multi_turn_agent(task(), calls, 8))
    assert row["simulated_user_turns"] == DEFAULT_MAX_USER_TURNS == 5


async def test_zero_user_turns_is_single_turn_and_never_asks_the_simulator() -> None:
    calls = FakeCalls(policy=[message("hello")])
    row = json.loads(await multi_turn_agent(task(max_user_turns=0), calls, 8))
    assert calls.user_requests == [] and row["simulated_user_turns"] == 0
    assert conversation(row) == [("assistant", "hello")]


async def test_usage_sums_the_policy_calls_only() -> None:
    calls = FakeCalls(policy=[message("a", tokens=3), message("b", tokens=4)], user=["more", STOP_MARKER])
    row = json.loads(await multi_turn_agent(task(), calls, 8))
    assert row["response"]["usage"]["total_tokens"] == 14


async def test_the_simulator_sees_persona_goal_and_the_conversation_from_the_users_side() -> None:
    calls = FakeCalls(policy=[call("Paris"), message("Paris is sunny.")], user=[STOP_MARKER])
    await multi_turn_agent(task(), calls, 8)
    [request] = calls.user_requests
    assert isinstance(request.instructions, str) and request.instructions.startswith(SIMULATOR_PREAMBLE)
    assert "Who you are: A terse traveller." in request.instructions
    assert "Your goal: Learn the weather in Paris and Tokyo." in request.instructions
    assert STOP_MARKER in request.instructions
    assert isinstance(request.input, list)
    seen = [(item.role, item_text(item)) for item in request.input]
    assert seen == [("assistant", "Weather in Paris?"), ("user", "Paris is sunny.")]  # no system, no tools
    assert request.tools is msgspec.UNSET  # the user has no tools


async def test_an_empty_simulator_reply_ends_the_conversation_without_the_goal_met() -> None:
    calls = FakeCalls(policy=[message("hi")], user=["  "])
    row = json.loads(await multi_turn_agent(task(), calls, 8))
    assert (row["simulated_user_turns"], row["user_goal_met"]) == (0, False)


async def test_a_policy_turn_cut_off_ends_the_conversation() -> None:
    cut = message("half an ans")
    cut.incomplete_details = IncompleteDetails(reason="max_output_tokens")
    calls = FakeCalls(policy=[cut], user=["more"])
    row = json.loads(await multi_turn_agent(task(), calls, 8))
    assert calls.user_requests == [] and row["simulated_user_turns"] == 0


async def test_max_steps_bounds_each_policy_turn() -> None:
    calls = FakeCalls(policy=[call("Paris")] * 5, user=["more"])
    row = json.loads(await multi_turn_agent(task(), calls, 2))
    assert len(calls.policy_requests) == 2 and calls.user_requests == []  # out of steps: no final message
    assert row["simulated_user_turns"] == 0


async def test_a_failing_simulator_fails_the_rollout_with_a_reason() -> None:
    calls = FakeCalls(policy=[message("hi")], user_fails=True)
    with pytest.raises(schemas.RolloutFailed) as failed:
        await multi_turn_agent(task(), calls, 8)
    assert failed.value.failure_class == "user_simulator_failed"
    assert "nobody serves it" in failed.value.message


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"user_goal": None}, "user_goal"),
        ({"user_goal": 3}, "user_goal"),
        ({"max_user_turns": -1}, "max_user_turns"),
        ({"max_user_turns": "two"}, "max_user_turns"),
    ],
)
async def test_a_row_without_a_usable_goal_or_limit_is_invalid_input(
    fields: dict[str, Any], reason: str
) -> None:
    row = json.loads(task())
    row.update(fields)
    if fields.get("user_goal", "") is None:
        del row["user_goal"]
    with pytest.raises(schemas.RolloutFailed) as failed:
        await multi_turn_agent(json.dumps(row).encode(), FakeCalls(), 8)
    assert failed.value.failure_class == "invalid_input" and reason in failed.value.message


async def test_the_offline_policy_plays_both_policy_and_user_simulator() -> None:
    calls = FakeCalls()
    row = json.loads(await multi_turn_agent(task(user_goal="I also need the weather in Tokyo."), calls, 8))
    users = [text for role, text in conversation(row) if role == "user"]
    assert users == ["I also need the weather in Tokyo."]  # the scripted user's goal, then the stop marker
    assert (row["simulated_user_turns"], row["user_goal_met"]) == (1, True)
    # The rollout is verified; what the scripted policy scores is not the point.
    assert conversation(row)[-1][0] == "assistant" and "reward" in row


def test_the_agent_kind_and_the_model_it_needs_are_registered() -> None:
    assert AGENT_KINDS["multi_turn_agent"] is multi_turn_agent
    agent = AGENTS["example_multi_turn_agent"]
    assert agent.environment == "example_multi_turn" and agent.other_models == (USER_SIMULATOR,)
    assert AGENTS["example_single_tool_call_simple_agent"].other_models == ()
    assert ENVIRONMENTS["example_multi_turn"].agent_kind == "multi_turn_agent"


def test_every_example_row_names_the_fields_the_agent_reads() -> None:
    for line in (EXAMPLES / "example_multi_turn.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert isinstance(row["user_goal"], str) and isinstance(row["user_persona"], str)
        assert row["agent_ref"]["name"] == "example_multi_turn_agent"
