"""Bad input to the `vllm` model function, injected by a local stub of a vLLM server
(`tests/vllm_stub.py`): each is a clear failure, a retry or an incomplete response, never
a sample with wrong tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest

from gymbus.functions import ModelOptions
from gymbus.functions.models._servers import Servers
from gymbus.functions.models.vllm_model import VLLMModel
from gymbus.schemas import BadRequest, FunctionFailed, Item, ResponsesCreateParams, UpstreamFailed
from tests.vllm_stub import GENERATION, PROMPT, VllmStub, serve_stub


@pytest.fixture(scope="module")
def stub_server() -> Iterator[tuple[VllmStub, str]]:
    yield from serve_stub()


@pytest.fixture
def stub(stub_server: tuple[VllmStub, str]) -> VllmStub:
    stub_server[0].reset()
    return stub_server[0]


@pytest.fixture
def stub_url(stub_server: tuple[VllmStub, str]) -> str:
    return stub_server[1]


_made: list[VLLMModel] = []


def made(url: str, **options: Any) -> VLLMModel:
    _made.append(VLLMModel(ModelOptions(base_url=url, model="stub", api="vllm", **options)))
    return _made[-1]


@pytest.fixture(autouse=True)
async def _close_models() -> AsyncIterator[None]:
    yield
    while _made:
        await _made.pop().aclose()


def request(*items: Item | dict[str, Any], **more: Any) -> ResponsesCreateParams:
    body = [msgspec.to_builtins(item) if isinstance(item, Item) else item for item in items]
    return msgspec.convert({"input": body or "weather in oslo?", **more}, ResponsesCreateParams)


def answered(prompt: list[int], generation: list[int]) -> Item:
    return Item(
        type="message",
        role="assistant",
        content="It is cold.",
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=[-0.5] * len(generation),
    )


async def test_the_tokens_land_on_the_last_item(stub: VllmStub, stub_url: str) -> None:
    response = await made(stub_url)(request())
    [message] = response.output
    assert (message.prompt_token_ids, message.generation_token_ids) == (PROMPT, GENERATION)
    assert message.generation_log_probs == [-0.5] * 3
    [(_, body)] = stub.requests
    assert (
        body["logprobs"] is True and body["return_token_ids"] is True and body["return_tokens_as_token_ids"]
    )


async def test_a_server_without_token_ids_fails_the_call(stub: VllmStub, stub_url: str) -> None:
    stub.token_ids = False
    with pytest.raises(FunctionFailed, match="model call 1 at .*no token ids") as failure:
        await made(stub_url)(request())
    assert not failure.value.transient
    response = await made(stub_url, token_capture=False)(request())  # capture off: a plain answer
    assert not isinstance(response.output[0].prompt_token_ids, list)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_errors_are_transient(stub: VllmStub, stub_url: str, status: int) -> None:
    stub.fail_next, stub.status, stub.message = 1, status, "engine dead"
    with pytest.raises(UpstreamFailed, match=f"HTTP {status}: .*engine dead") as failure:
        await made(stub_url)(request())
    assert failure.value.transient


async def test_a_rejected_request_is_a_bad_request(stub: VllmStub, stub_url: str) -> None:
    stub.fail_next, stub.status, stub.message = 1, 401, "bad key"
    with pytest.raises(BadRequest, match="HTTP 401"):
        await made(stub_url, api_key="sk-secret")(request())


async def test_a_context_overflow_is_an_empty_incomplete_response(stub: VllmStub, stub_url: str) -> None:
    stub.fail_next, stub.status = 1, 400
    stub.message = "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens"
    response = await made(stub_url)(request())
    assert response.output == [] and response.status == "incomplete"
    assert (
        response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    )


async def test_a_dead_server_hands_its_rollouts_to_a_live_one(stub: VllmStub, stub_url: str) -> None:
    dead = "http://127.0.0.1:9/v1"
    order = Servers([dead, stub_url], cooldown=30).order
    key = next(f"rollout-{index}" for index in range(100) if order(f"rollout-{index}")[0] == dead)
    model = made(f"{dead},{stub_url}")
    response = await model(request(prompt_cache_key=key))
    assert response.output[0].generation_token_ids == GENERATION
    assert model.servers.order(key)[0] == stub_url  # skipped while it cools down


async def test_no_live_server_is_a_transient_failure() -> None:
    with pytest.raises(UpstreamFailed, match="no model server answered") as failure:
        await made("http://127.0.0.1:9/v1,http://127.0.0.1:7/v1")(request())
    assert failure.value.transient


async def test_a_later_call_whose_rendering_extends_the_history_uses_chat(
    stub: VllmStub, stub_url: str
) -> None:
    stub.rendering = [*PROMPT, *GENERATION, 1, 12, 2, 1]
    model = made(stub_url)
    response = await model(request({"role": "user", "content": "q"}, answered(PROMPT, GENERATION)))
    assert response.output[-1].prompt_token_ids == stub.rendering
    assert [path for path, _ in stub.requests] == ["tokenize", "chat"] and model.rebuilt_prompts == 0


async def test_a_drifted_rendering_is_generated_from_the_token_ids(stub: VllmStub, stub_url: str) -> None:
    stub.rendering = [*PROMPT, 89, 2, 1, 12, 2, 1]  # the server re-tokenised the answer as 89
    response = await made(stub_url)(
        request(
            {"role": "user", "content": "q"},
            answered(PROMPT, GENERATION),
            tools=[{"type": "function", "name": "get_weather"}],
        )
    )
    [(_, completion)] = [(path, body) for path, body in stub.requests if path == "completions"]
    assert completion["prompt"] == [*PROMPT, *GENERATION, 1, 12, 2, 1]
    assert completion["max_tokens"] == 2048 - len(completion["prompt"])  # the rest of the context, as chat
    [call] = response.output
    assert (call.kind, call.name, call.arguments) == ("function_call", "get_weather", '{"city": "Oslo"}')
    assert call.prompt_token_ids == completion["prompt"] and call.generation_token_ids == [11, 2]


async def test_a_prompt_that_does_not_extend_the_previous_turn_fails_naming_the_call(
    stub: VllmStub, stub_url: str
) -> None:
    stub.rendering = [1, 5, 6, 3, 4]  # no trace of the previous call's end-of-turn token
    with pytest.raises(BadRequest, match="model call 2: .*model call 1"):
        await made(stub_url)(request({"role": "user", "content": "q"}, answered(PROMPT, GENERATION)))
    assert [path for path, _ in stub.requests] == ["tokenize"]  # nothing generated


async def test_a_server_whose_chat_prompt_differs_from_its_rendering_fails(
    stub: VllmStub, stub_url: str
) -> None:
    stub.rendering = [*PROMPT, *GENERATION, 1, 12]
    stub.chat_prompt = [*PROMPT, *GENERATION, 1, 13]
    with pytest.raises(FunctionFailed, match="model call 2 .*rendered the prompt differently"):
        await made(stub_url)(request({"role": "user", "content": "q"}, answered(PROMPT, GENERATION)))


async def test_input_with_incomplete_token_fields_is_a_bad_request(stub_url: str) -> None:
    broken = Item(
        type="message", role="assistant", content="x", prompt_token_ids=[1], generation_token_ids=[2]
    )
    with pytest.raises(BadRequest, match="incomplete token fields"):
        await made(stub_url)(request({"role": "user", "content": "q"}, broken))


WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


async def test_a_tool_call_the_server_did_not_parse_fails_the_call_naming_the_flags(
    stub: VllmStub, stub_url: str
) -> None:
    stub.content = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    with pytest.raises(BadRequest, match="did not parse; start vLLM with --enable-auto-tool-choice"):
        await made(stub_url)(request(tools=[WEATHER_TOOL]))
    # Without tools offered (or with tool_choice "none") the same text is just text.
    assert (await made(stub_url)(request())).output[0].content
    assert (await made(stub_url)(request(tools=[WEATHER_TOOL], tool_choice="none"))).output[0].content
