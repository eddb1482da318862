"""The simple agent's loop, driven through plain fake `Calls`: no bus needed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import msgspec
import pytest

from gymbus import schemas
from gymbus.functions.agents.simple_agent import simple_agent
from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import ContentPart, IncompleteDetails, Item, Response, ResponsesCreateParams, Usage

ROW = json.dumps(
    {
        "responses_create_params": {
            "input": [{"role": "user", "content": "weather in sf?"}],
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                }
            ],
        },
        "expected_answer": "cold",
        "_ng_task_index": 3,
    }
).encode()


@dataclass
class FakeCalls:
    """`Calls` with a scripted model and tools, recording what the agent sends."""

    model_replies: list[Response] = field(default_factory=list)
    tool_outputs: dict[str, str] = field(default_factory=dict)
    seeded: list[bytes] = field(default_factory=list)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    model_calls: int = 0

    async def seed(self, row: bytes) -> bytes:
        self.seeded.append(row)
        return b"{}"

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
        self.model_calls += 1
        if self.model_replies:
            return self.model_replies.pop(0)
        return await offline_policy(params)

    async def tool(self, name: str, arguments: str) -> str:
        self.tool_calls.append((name, arguments))
        if name == "failing":
            raise schemas.FunctionFailed("the tool broke")
        if name not in self.tool_outputs:
            raise schemas.UnknownTool(f"no tool named {name!r}")
        return self.tool_outputs[name]

    async def verify(self, row: bytes, response: Response) -> bytes:
        return json.dumps({"reward": 0.5, "seen_items": len(response.output)}).encode()


def call(name: str, arguments: str, call_id: str = "c1") -> Response:
    item = Item(type="function_call", name=name, arguments=arguments, call_id=call_id)
    return Response(
        id="r",
        created_at=0,
        model="m",
        output=[item],
        usage=Usage(input_tokens=3, output_tokens=2, total_tokens=5),
    )


def message(text: str) -> Response:
    item = Item(type="message", role="assistant", content=[ContentPart(type="output_text", text=text)])
    return Response(
        id="r",
        created_at=0,
        model="m",
        output=[item],
        usage=Usage(input_tokens=7, output_tokens=1, total_tokens=8),
    )


async def test_a_rollout_keeps_the_row_and_adds_response_and_reward() -> None:
    calls = FakeCalls(tool_outputs={"get_weather": '{"weather_description": "The weather in sf is cold."}'})
    row = json.loads(await simple_agent(ROW, calls, 8))
    assert calls.seeded == [ROW]
    assert row["expected_answer"] == "cold" and row["_ng_task_index"] == 3
    assert row["reward"] == 0.5 and row["seen_items"] == 3
    kinds = [item["type"] for item in row["response"]["output"]]
    assert kinds == ["function_call", "function_call_output", "message"]  # generated items only


async def test_usage_is_summed_over_model_calls() -> None:
    calls = FakeCalls(
        model_replies=[call("get_weather", '{"city": "sf"}'), message("cold")],
        tool_outputs={"get_weather": "{}"},
    )
    row = json.loads(await simple_agent(ROW, calls, 8))
    assert row["response"]["usage"]["input_tokens"] == 10
    assert row["response"]["usage"]["total_tokens"] == 13


async def test_bad_json_arguments_become_a_readable_tool_output() -> None:
    calls = FakeCalls(model_replies=[call("get_weather", "{not json"), message("sorry")])
    row = json.loads(await simple_agent(ROW, calls, 8))
    output = row["response"]["output"][1]
    assert output["type"] == "function_call_output" and output["call_id"] == "c1"
    assert "Invalid tool call arguments" in json.loads(output["output"])["error"]
    assert calls.tool_calls == []


async def test_a_failing_tool_becomes_a_readable_tool_output_and_the_loop_goes_on() -> None:
    calls = FakeCalls(model_replies=[call("failing", "{}"), message("ok")])
    row = json.loads(await simple_agent(ROW, calls, 8))
    assert json.loads(row["response"]["output"][1]["output"]) == {"error": "the tool broke"}
    assert row["response"]["output"][-1]["type"] == "message"


async def test_a_tool_the_environment_lacks_reads_as_a_nemo_gym_servers_answer_to_it() -> None:
    # NeMo Gym's simple agent hands the model the server's 404 body: the model sees the same.
    calls = FakeCalls(model_replies=[call("no_such_tool", "{}"), message("ok")])
    row = json.loads(await simple_agent(ROW, calls, 8))
    assert row["response"]["output"][1]["output"] == '{"detail":"Not Found"}'
    assert row["response"]["output"][-1]["type"] == "message"


async def test_max_steps_bounds_the_model_calls() -> None:
    endless = [call("get_weather", '{"city": "sf"}', f"c{i}") for i in range(50)]
    calls = FakeCalls(model_replies=endless, tool_outputs={"get_weather": "{}"})
    await simple_agent(ROW, calls, 4)
    assert calls.model_calls == 4


async def test_incomplete_details_stops_the_loop() -> None:
    details = IncompleteDetails(reason="max_output_tokens")
    truncated = msgspec.structs.replace(call("get_weather", '{"city": "sf"}'), incomplete_details=details)
    calls = FakeCalls(model_replies=[truncated], tool_outputs={"get_weather": "{}"})
    await simple_agent(ROW, calls, 8)
    assert calls.model_calls == 1 and calls.tool_calls == []


async def test_a_model_failure_fails_the_rollout_with_its_class() -> None:
    class Down(FakeCalls):
        async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
            raise schemas.UpstreamFailed("model endpoint answered HTTP 500")

    with pytest.raises(schemas.RolloutFailed) as failure:
        await simple_agent(ROW, Down(), 8)
    assert failure.value.failure_class == "model_failed"
