"""The `openai` adapter, with the real `openai` SDK against a local OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from gymbus import schemas
from gymbus.functions import ModelOptions
from gymbus.functions.models.openai_model import OpenAIModel
from gymbus.schemas import ResponsesCreateParams, output_text
from tests.fake_openai import FakeOpenAI

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def request(*items: dict[str, object], model: str | None = None) -> ResponsesCreateParams:
    body: dict[str, object] = {
        "input": list(items),
        "tools": TOOLS,
        "instructions": "be brief",
        "max_output_tokens": 64,
    }
    if model:
        body["model"] = model
    return msgspec.convert(body, ResponsesCreateParams)


_made: list[OpenAIModel] = []


def made(options: ModelOptions) -> OpenAIModel:
    """An adapter closed after the test (its aiohttp pool must not outlive the test's loop)."""
    _made.append(OpenAIModel(options))
    return _made[-1]


@pytest.fixture(autouse=True)
async def _close_adapters() -> AsyncIterator[None]:
    yield
    while _made:
        await _made.pop().aclose()


def adapter(server: FakeOpenAI, api: str, key: str = "sk-test-key") -> OpenAIModel:
    return made(ModelOptions(base_url=server.url, api_key=key, model="served-model", api=api, max_retries=0))


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_tool_call_then_a_message(openai_server: FakeOpenAI, api: str) -> None:
    model = adapter(openai_server, api)
    first = await model(request({"role": "user", "content": "weather?"}, model="ignored"))
    [call] = [item for item in first.output if item.kind == "function_call"]
    assert call.name == "get_weather" and json.loads(str(call.arguments)) == {"city": "Paris"}
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"t": "cold"}'}
    second = await model(request({"role": "user", "content": "weather?"}, msgspec.to_builtins(call), result))
    assert output_text(second) == "It is cold in Paris."
    assert second.usage is not None and second.usage.input_tokens == 10
    assert [r.body["model"] for r in openai_server.requests] == ["served-model", "served-model"]
    assert openai_server.requests[0].authorization == "Bearer sk-test-key"
    assert {r.content_type for r in openai_server.requests} == {"application/json"}


async def test_chat_conversion_sends_what_chat_servers_expect(openai_server: FakeOpenAI) -> None:
    model = adapter(openai_server, "chat")
    call = {
        "type": "function_call",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "call_id": "call_9",
    }
    result = {"type": "function_call_output", "call_id": "call_9", "output": "cold"}
    response = await model(
        request({"role": "developer", "content": "sys"}, {"role": "user", "content": "q"}, call, result)
    )
    body = openai_server.requests[-1].body
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user", "assistant", "tool"]
    assert body["messages"][3]["tool_calls"][0]["id"] == "call_9"
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "call_9", "content": "cold"}
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["max_tokens"] == 64
    assert [item.kind for item in response.output] == ["reasoning", "message"]  # <think> split off


async def test_an_endpoint_error_is_upstream_failed_and_never_shows_the_key(
    openai_server: FakeOpenAI,
) -> None:
    openai_server.fail_next = 1
    openai_server.fail_message = "bad key sk-very-secret"
    with pytest.raises(schemas.UpstreamFailed) as failure:
        await adapter(openai_server, "responses", key="sk-very-secret")(
            request({"role": "user", "content": "hi"})
        )
    assert "HTTP 500" in failure.value.message
    assert "sk-very-secret" not in failure.value.message


async def test_server_errors_are_retried_by_the_sdk(openai_server: FakeOpenAI) -> None:
    openai_server.fail_next = 2
    model = made(ModelOptions(base_url=openai_server.url, api_key="k", model="m", max_retries=3))
    response = await model(request({"role": "user", "content": "hi"}))
    assert response.output and len(openai_server.requests) == 3


async def test_a_context_overflow_is_an_empty_incomplete_response(openai_server: FakeOpenAI) -> None:
    openai_server.fail_next, openai_server.fail_status = 1, 400
    openai_server.fail_message = "This model's maximum context length is 4096 tokens"
    try:
        response = await adapter(openai_server, "chat")(request({"role": "user", "content": "hi"}))
    finally:
        openai_server.fail_status, openai_server.fail_message = 500, "upstream exploded"
    assert response.output == [] and response.incomplete_details is not None


async def test_an_unreachable_endpoint_is_upstream_failed() -> None:
    model = made(ModelOptions(base_url="http://127.0.0.1:9/v1", api_key="k", model="m", max_retries=0))
    with pytest.raises(schemas.UpstreamFailed, match="timed out or refused|cannot connect"):
        await model(request({"role": "user", "content": "hi"}))


def test_the_key_is_not_in_the_options_repr() -> None:
    assert "sk-hidden" not in repr(ModelOptions(api_key="sk-hidden"))


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, schemas.UpstreamFailed), (503, schemas.UpstreamFailed), (401, schemas.BadRequest)],
)
async def test_endpoint_statuses_map_to_transient_or_permanent(
    openai_server: FakeOpenAI, status: int, kind: type
) -> None:
    openai_server.fail_next, openai_server.fail_status = 1, status
    try:
        with pytest.raises(kind) as failure:
            await adapter(openai_server, "responses")(request({"role": "user", "content": "hi"}))
    finally:
        openai_server.fail_status = 500
    assert failure.value.transient == (kind is schemas.UpstreamFailed)
    assert len(openai_server.requests) == 1  # no hidden retries inside the adapter


NEWER_OPTIONS = {
    "context_management": [{"type": "compaction", "compact_threshold": 2000}],
    "conversation": "conv_1",
    "prompt_cache_key": "task-7",
    "prompt_cache_retention": "24h",
    "safety_identifier": "user-hash",
}


async def test_newer_request_options_reach_the_endpoint_and_stream_options_do_not(
    openai_server: FakeOpenAI,
) -> None:
    params = msgspec.convert(
        {"input": "hi", **NEWER_OPTIONS, "stream": False, "stream_options": {"include_obfuscation": False}},
        ResponsesCreateParams,
    )
    await adapter(openai_server, "responses")(params)
    [sent] = openai_server.requests
    assert {key: sent.body[key] for key in NEWER_OPTIONS} == NEWER_OPTIONS
    assert "stream_options" not in sent.body and "stream" not in sent.body
