"""The bridge's loopback shims a hosted NeMo Gym server or agent calls, without NeMo Gym: its
models (Responses and Chat Completions, a judge nobody serves), its resources server (calls
made as their rollout's), the rollout tag, and a Gymnasium episode split into model turns.
(With real NeMo Gym processes: tests/integration/test_nemo_gym*.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest

from gymbus.functions.models._chat import chat_request
from gymbus.functions.models.openai_model import responses_body
from gymbus.functions.nemo_gym._chat import params_from_chat
from gymbus.functions.nemo_gym._replay import model_turns
from gymbus.functions.nemo_gym._resources_shim import ResourcesShim
from gymbus.functions.nemo_gym._rollouts import Rollouts, tag, take_field, untag
from gymbus.functions.nemo_gym._shim import ModelShims
from gymbus.schemas import (
    BadRequest,
    ContentPart,
    Item,
    NoResponders,
    Response,
    ResponsesCreateParams,
    UnknownTool,
    input_items,
    item_text,
)


def answer(text: str, **tokens: Any) -> Response:
    part = ContentPart(type="output_text", text=text, annotations=[])
    item = Item(type="message", id="m", role="assistant", status="completed", content=[part], **tokens)
    return Response(id="r", created_at=time.time(), model="m", output=[item])


class Served:
    """Models: `served` answer with what they were asked; any other is not served."""

    def __init__(self, *served: str) -> None:
        self.served = served
        self.asked: list[tuple[str, ResponsesCreateParams]] = []

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        if model not in self.served:
            raise NoResponders(f"nobody serves gym.model.{model}.responses")
        self.asked.append((model, params))
        return answer(" | ".join(item_text(item) for item in input_items(params)))


class RecordingCalls:
    """A rollout's `Calls`, recording what the shims sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def seed(self, row: bytes) -> bytes:
        self.sent.append(("seed", json.loads(row)))
        return b'{"observation": "first", "info": {}}'

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
        self.sent.append(("model", model))
        return answer(
            "from the rollout", prompt_token_ids=[1, 2], generation_token_ids=[3], generation_log_probs=[-0.5]
        )

    async def tool(self, name: str, arguments: str) -> str:
        if name == "missing":
            raise UnknownTool("environment e has no tool named 'missing'")
        self.sent.append((name, json.loads(arguments)))
        return '{"ok": true}'

    async def verify(self, row: bytes, response: Response | msgspec.Raw) -> bytes:
        self.sent.append(("verify", json.loads(row)))
        self.verified = response
        return b'{"reward": 1.0}'


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_a_judge_nobody_serves_fails_at_once_naming_it_never_as_a_rate_limit(
    http: aiohttp.ClientSession,
) -> None:
    shims = ModelShims(Served("policy"))
    ports = await shims.start(("judge_model",))
    try:
        assert set(ports) == {"judge_model", "policy_model"}  # the policy always: `${policy_base_url}`
        body = {"input": "is 2 = 2?"}
        async with http.post(f"http://127.0.0.1:{ports['judge_model']}/v1/responses", json=body) as reply:
            said = await reply.json()
            assert reply.status == 424  # not 502/503: NeMo Gym's client retries those without end
            assert "no model serves `judge_model`" in reply.reason and "--served-model" in reply.reason
            assert said["error"]["type"] == "no_responders"
        async with http.post(f"http://127.0.0.1:{ports['policy_model']}/v1/responses", json=body) as reply:
            assert reply.status == 200
            said = await reply.json()
            assert said["output"][0]["content"][0]["text"] == "is 2 = 2?"
            assert (said["parallel_tool_calls"], said["tool_choice"], said["tools"]) == (True, "auto", [])
    finally:
        await shims.stop()


async def test_chat_completions_reach_the_model_as_responses_and_come_back_as_a_chat_completion(
    http: aiohttp.ClientSession,
) -> None:
    models = Served("policy")
    shims = ModelShims(models)
    ports = await shims.start(())
    chat = {
        "model": "policy",
        "messages": [
            {"role": "system", "content": "Judge."},
            {"role": "user", "content": [{"type": "text", "text": "Is it?"}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "yes"},
        ],
        "max_tokens": 50,
        "temperature": 0.7,
        "tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}],
    }  # fmt: skip
    try:
        # As 0.7.0's rollout capture prefixes it, too.
        url = f"http://127.0.0.1:{ports['policy_model']}/ng-rollout/abc/v1/chat/completions"
        async with http.post(url, json=chat) as reply:
            assert reply.status == 200
            said = await reply.json()
    finally:
        await shims.stop()
    ((_, params),) = models.asked
    kinds = [
        (item.kind, item.role if item.kind == "message" else item.call_id) for item in input_items(params)
    ]
    assert kinds == [
        ("message", "system"),
        ("message", "user"),
        ("function_call", "c1"),
        ("function_call_output", "c1"),
    ]
    assert (params.max_output_tokens, params.temperature) == (50, 0.7)
    assert params.tools and params.tools[0].name == "look"
    assert said["object"] == "chat.completion" and said["choices"][0]["finish_reason"] == "stop"
    assert input_items(params)[3].output == "yes"
    assert said["choices"][0]["message"]["content"].startswith("Judge. | Is it?")


# A judge's Chat Completions request as `bbq` sends it (NeMo Gym 0.7.0): a strict JSON schema
# for the answer and a fixed seed, which its calibration depends on.
BBQ_JUDGE = {
    "messages": [{"role": "user", "content": "Classify the answer."}],
    "temperature": 0.0,
    "seed": 42,
    "max_tokens": 4096,
    "stop": ["</json>"],
    "response_format": {"type": "json_schema", "json_schema": {
        "name": "bbq_answer_v1", "strict": True,
        "schema": {"type": "object", "properties": {"label": {"enum": ["correct_answer", "incorrect_answer"]}},
                   "required": ["label"], "additionalProperties": False},
    }},
}  # fmt: skip


def test_every_field_of_a_judges_chat_request_reaches_a_chat_endpoint_as_it_was_sent() -> None:
    params = params_from_chat(BBQ_JUDGE)
    form = BBQ_JUDGE["response_format"]["json_schema"]  # type: ignore[index]
    assert params.text == {"format": {"type": "json_schema", **form}}  # Responses' flat form
    assert json.loads(params.metadata["extra_body"]) == {"seed": 42, "stop": ["</json>"]}  # type: ignore[index]
    # What GymBus's chat adapters (openai with api=chat, vllm) send to the endpoint.
    sent = chat_request(params, "judge")
    sent |= sent.pop("extra_body")
    assert sent == {**BBQ_JUDGE, "model": "judge"}
    # A Responses endpoint gets the schema as Responses names it.
    assert responses_body(params, "judge")["text"]["format"]["schema"] == form["schema"]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("n", 2, "n=2"),
        ("stream", True, "stream"),
        ("audio", {"voice": "alloy"}, "audio"),
        ("functions", [], "'functions'"),
        ("response_format", {"type": "grammar"}, "'grammar'"),
    ],
)
def test_a_chat_field_that_cannot_be_carried_is_refused_by_name(field: str, value: Any, said: str) -> None:
    with pytest.raises(BadRequest, match=said):
        params_from_chat({**BBQ_JUDGE, field: value})


async def test_a_tagged_model_call_is_its_rollouts_and_keeps_the_token_ids(
    http: aiohttp.ClientSession,
) -> None:
    rollouts = Rollouts()
    shims = ModelShims(Served(), rollouts)
    ports = await shims.start(())
    calls = RecordingCalls()
    token, _ = rollouts.start(calls)
    body = {"input": "hi", "metadata": {"gymbus_rollout": token, "extra_body": "{}"}}
    try:
        async with http.post(f"http://127.0.0.1:{ports['policy_model']}/v1/responses", json=body) as reply:
            said = await reply.json()
    finally:
        await shims.stop()
    assert calls.sent == [("model", "policy")]
    last = said["output"][-1]
    assert (last["prompt_token_ids"], last["generation_token_ids"], last["generation_log_probs"]) == (
        [1, 2],
        [3],
        [-0.5],
    )


async def test_the_resources_shim_makes_each_call_as_its_rollouts_and_refuses_one_of_no_rollout(
    http: aiohttp.ClientSession,
) -> None:
    rollouts = Rollouts()
    shim = ResourcesShim("game", rollouts)
    base = f"http://127.0.0.1:{await shim.start()}"
    calls = RecordingCalls()
    token, rollout = rollouts.start(calls)
    row = json.loads(
        tag(json.dumps({"responses_create_params": {"input": "go"}, "level": 2}).encode(), token)
    )
    try:
        async with http.post(f"{base}/reset", json=row) as reply:
            assert reply.status == 200 and await reply.json() == {"observation": "first", "info": {}}
            cookie = reply.cookies["gymbus_rollout"].value
        assert cookie == token
        async with http.post(f"{base}/step", json={"action": 1}, cookies={"gymbus_rollout": cookie}) as reply:
            assert reply.status == 200 and await reply.json() == {"ok": True}
        response = {"id": "r", "created_at": 1.0, "model": "m", "output": []}
        async with http.post(f"{base}/verify", json={**row, "response": response}) as reply:
            verdict = await reply.json()
        # As a NeMo Gym server answers: the request, with the verifier's fields.
        assert verdict["reward"] == 1.0 and verdict["level"] == 2 and "response" in verdict
        assert "_gymbus_rollout" not in verdict
        async with http.post(f"{base}/missing", json={}, cookies={"gymbus_rollout": cookie}) as reply:
            assert reply.status == 404 and await reply.json() == {
                "detail": "Not Found"
            }  # a NeMo Gym server's
        async with http.post(f"{base}/step", json={"action": 1}) as reply:
            assert reply.status == 400 and "outside any rollout" in (await reply.json())["error"]["message"]
    finally:
        await shim.stop()
    seeded = calls.sent[0]
    assert seeded[0] == "seed" and "_gymbus_rollout" not in seeded[1] and seeded[1]["level"] == 2
    assert [kind for kind, _ in calls.sent] == ["seed", "step", "verify"] and rollout.lost is None


async def test_a_call_that_says_its_rollout_only_in_nemo_gyms_path_prefix_is_that_rollouts(
    http: aiohttp.ClientSession,
) -> None:
    # toolsandbox's agent seeds with `{"task_idx": ...}` and threads no cookie: 0.7.0's own
    # client says the rollout in the path (`_ng_rollout_id` of the row, observability on).
    rollouts = Rollouts()
    shim = ResourcesShim("sandbox", rollouts)
    models = ModelShims(Served(), rollouts)
    base = f"http://127.0.0.1:{await shim.start()}"
    ports = await models.start(())
    calls = RecordingCalls()
    token, rollout = rollouts.start(calls)
    try:
        async with http.post(f"{base}/ng-rollout/{token}/seed_session", json={"task_idx": 3}) as reply:
            assert reply.status == 200
        async with http.post(f"{base}/ng-rollout/{token}/step", json={"env_id": "e"}) as reply:
            assert reply.status == 200 and await reply.json() == {"ok": True}
        policy = f"http://127.0.0.1:{ports['policy_model']}/ng-rollout/{token}/v1/responses"
        async with http.post(policy, json={"input": "hi"}) as reply:
            assert reply.status == 200
        # Its response carries fields of its own, which its server's verify requires.
        response = {"id": "r", "created_at": 1.0, "model": "m", "output": [], "env_id": "e"}
        verify = {"responses_create_params": {"input": "go"}, "response": response}
        async with http.post(f"{base}/ng-rollout/{token}/verify", json=verify) as reply:
            assert reply.status == 200 and (await reply.json())["reward"] == 1.0
        assert msgspec.json.decode(calls.verified)["env_id"] == "e"
        async with http.post(f"{base}/ng-rollout/not-{token}/step", json={"env_id": "e"}) as reply:
            assert reply.status == 400 and "outside any rollout" in (await reply.json())["error"]["message"]
    finally:
        await shim.stop()
        await models.stop()
    assert calls.sent == [
        ("seed", {"task_idx": 3}),
        ("step", {"env_id": "e"}),
        ("model", "policy"),
        ("verify", verify),
    ]
    assert rollout.lost is None


def test_the_rollout_tag_travels_in_the_row_and_its_parameters_and_leaves_no_trace() -> None:
    row = json.dumps(
        {"responses_create_params": {"input": "q", "metadata": {"extra_body": "{}"}}, "x": 1}
    ).encode()
    tagged = json.loads(tag(row, "t1"))
    assert tagged["_gymbus_rollout"] == tagged["_ng_rollout_id"] == "t1"
    assert tagged["responses_create_params"]["metadata"] == {"extra_body": "{}", "gymbus_rollout": "t1"}
    # An agent that sends the row's extra fields on (0.4.0's) sends both: both are taken out.
    token, body = take_field(json.dumps({**tagged, "x": 2}).encode())
    assert token == "t1" and "_ng_rollout_id" not in json.loads(body)
    reply = {"responses_create_params": tagged["responses_create_params"], "reward": 1.0, "_gymbus_rollout": "t1",
             "_ng_rollout_id": "t1"}  # fmt: skip
    row_out = json.loads(untag(json.dumps(reply).encode(), row))
    assert row_out == {"responses_create_params": {"input": "q", "metadata": {"extra_body": "{}"}}, "x": 1,
                       "reward": 1.0}  # fmt: skip
    bare = json.dumps({"responses_create_params": {"input": "q"}}).encode()
    reply = {
        "responses_create_params": {**json.loads(tag(bare, "t2"))["responses_create_params"]},
        "reward": 0.0,
    }
    assert "metadata" not in json.loads(untag(json.dumps(reply).encode(), bare))["responses_create_params"]
    # A row's own NeMo Gym rollout id is the row's again.
    own = json.dumps({"responses_create_params": {"input": "q"}, "_ng_rollout_id": "7-0"}).encode()
    reply = {"_ng_rollout_id": "t3", "reward": 0.0}
    assert json.loads(untag(json.dumps(reply).encode(), own))["_ng_rollout_id"] == "7-0"


def test_a_gymnasium_episode_splits_into_the_models_turns() -> None:
    output = [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "move", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "moved"},
        {"type": "message", "role": "user", "content": "next?"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]
    assert model_turns(output) == [output[:2], output[4:]]
    assert model_turns([]) == []
