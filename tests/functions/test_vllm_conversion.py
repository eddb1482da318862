"""The `vllm` model function's pure parts: Responses ↔ Chat Completions for every item type,
Hermes tool calls in raw text, token histories, and the choice of server. No server needed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from gymbus.functions import ModelOptions
from gymbus.functions.models._audio import with_audio
from gymbus.functions.models._chat import ChatCompletion, chat_messages, chat_request, response_from_chat
from gymbus.functions.models._hermes import split_tool_calls
from gymbus.functions.models._servers import Servers
from gymbus.functions.models._tokens import (
    CallTokens,
    History,
    continue_prompt,
    generation_of,
    history_of,
    with_tokens,
)
from gymbus.functions.models.vllm_model import _rollout_key
from gymbus.functions.registry import policy_adapter
from gymbus.schemas import BadRequest, FunctionFailed, Item, Response, ResponsesCreateParams

TOOL = {"type": "function", "name": "get_weather", "description": "", "strict": True,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip


def params(*items: dict[str, object], **more: object) -> ResponsesCreateParams:
    return msgspec.convert({"input": list(items), **more}, ResponsesCreateParams)


def chat_reply(message: dict[str, object], finish: str = "stop", **more: object) -> ChatCompletion:
    body = {
        "id": "c1",
        "model": "m",
        "created": 5,
        "choices": [{"message": message, "finish_reason": finish}],
    }
    body.update(more)
    return msgspec.json.decode(json.dumps(body), type=ChatCompletion)


def test_every_input_item_type_becomes_its_chat_message() -> None:
    request = params(
        {"role": "developer", "content": "house rules"},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "weather in "}, {"type": "input_text", "text": "sf?"}],
        },
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "need the tool"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "SF"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "cold"},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is cold."}]},
        instructions="be brief",
        tools=[TOOL],
        max_output_tokens=32,
        temperature=0.7,
    )
    body = chat_request(request, "served", reasoning="think")
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "house rules"},
        {"role": "user", "content": "weather in sf?"},
        {"role": "assistant", "content": "<think>need the tool</think>",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "SF"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
        {"role": "assistant", "content": "<think>a\n\nb</think>It is cold."},
    ]  # fmt: skip
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "", "parameters": TOOL["parameters"]},
        }
    ]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("served", 32, 0.7)


def test_reasoning_is_dropped_for_hosted_apis_and_kept_last() -> None:
    thought = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]}
    request = params({"role": "user", "content": "hi"}, thought)
    assert chat_messages(request) == [{"role": "user", "content": "hi"}]
    assert chat_messages(request, "think")[-1] == {"role": "assistant", "content": "<think>hmm</think>"}


def test_extra_body_from_metadata_is_merged() -> None:
    extra = json.dumps({"seed": 3, "top_k": 5})
    body = chat_request(params({"role": "user", "content": "hi"}, metadata={"extra_body": extra}), "m")
    assert body["extra_body"] == {"seed": 3, "top_k": 5}


def test_audio_in_metadata_goes_before_the_last_user_messages_text(tmp_path: Path) -> None:
    """NeMo Gym's audio side channel (`asr_with_pc`'s rows), as its vLLM adapter splices it."""
    system, user = {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Transcribe."}
    clip = "data:audio/wav;base64,UklGRg=="
    body = chat_request(params(system, user, metadata={"audio_data": clip}), "m")
    spliced = with_audio(body, {"audio_data": clip})
    assert spliced["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": clip}},
                                     {"type": "text", "text": "Transcribe."}]},
    ]  # fmt: skip
    assert body["messages"][1] == {"role": "user", "content": "Transcribe."}  # the request is not changed
    first, second = tmp_path / "a.flac", tmp_path / "b.WAV"
    first.write_bytes(b"fLaC")
    second.write_bytes(b"RIFF")
    files = with_audio(
        chat_request(params(system), "m"), {"audio_paths": json.dumps([str(first), str(second)])}
    )
    assert files["messages"][-1] == {"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": "data:audio/flac;base64,ZkxhQw=="}},
        {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,UklGRg=="}},
    ]}  # fmt: skip
    assert with_audio(body, {"extra_body": "{}"}) is body
    for metadata, said in [
        ({"audio_data": clip, "audio_path": str(first)}, "exactly one"),
        ({"audio_path": "clips/a.wav"}, "relative"),
        ({"audio_path": str(tmp_path / "a.aiff")}, "unknown format"),
        ({"audio_path": str(tmp_path / "gone.wav")}, "cannot be read"),
        ({"audio_paths": str(first)}, "list of files"),
    ]:
        with pytest.raises(BadRequest, match=said):
            with_audio(body, metadata)


def test_a_reply_becomes_reasoning_message_and_function_call_items() -> None:
    reply = chat_reply(
        {"content": "<think>\nlook it up\n</think>\n\nChecking.",
         "tool_calls": [{"id": "t1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "SF"}'}}]},
        finish="tool_calls",
        usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    )  # fmt: skip
    response = response_from_chat(reply)
    assert [item.kind for item in response.output] == ["reasoning", "message", "function_call"]
    reasoning, message, call = response.output
    assert reasoning.summary[0].text == "look it up"  # type: ignore[index]
    assert message.content[0].text == "Checking."  # type: ignore[index,union-attr]
    assert (call.call_id, call.name, call.arguments) == ("t1", "get_weather", '{"city": "SF"}')
    assert response.status == "completed" and response.usage is not None and response.usage.total_tokens == 10


def test_the_servers_reasoning_field_and_a_cut_off_reply() -> None:
    response = response_from_chat(
        chat_reply({"content": "partial", "reasoning": "thinking"}, finish="length")
    )
    assert [item.kind for item in response.output] == ["reasoning", "message"]
    assert response.status == "incomplete" and response.incomplete_details is not None


def test_generated_items_sent_back_render_as_they_were_generated() -> None:
    reply = chat_reply(
        {"content": "<think>x</think>",
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}
    )  # fmt: skip
    output = response_from_chat(reply).output
    back = chat_messages(params({"role": "user", "content": "q"}, *msgspec.to_builtins(output)), "think")
    assert back[1] == {
        "role": "assistant",
        "content": "<think>x</think>",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("plain answer", "plain answer", []),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', "",
         [("get_weather", '{"city": "Oslo"}')]),
        ('ok <tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": 1}}',
         "ok ", [("a", "{}"), ("b", '{"x": 1}')]),
        ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
        ('<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),
    ],
)  # fmt: skip
def test_hermes_tool_calls_in_raw_text(text: str, content: str, calls: list[tuple[str, str]]) -> None:
    found_content, found = split_tool_calls(text)
    assert found_content == content
    assert [(name, arguments) for _, name, arguments in found] == calls
    assert len({call_id for call_id, _, _ in found}) == len(found)


def token_item(prompt: list[int], generation: list[int]) -> Item:
    return Item(
        type="message",
        role="assistant",
        content="x",
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=[-0.5] * len(generation),
    )


def test_the_history_is_the_last_calls_prompt_and_generation() -> None:
    items = [Item(role="user", content="q"), token_item([1, 2], [3, 9]), Item(type="function_call_output"),
             token_item([1, 2, 3, 9, 4], [5, 9])]  # fmt: skip
    assert history_of(items) == History(seen=[1, 2, 3, 9, 4, 5, 9], step=3)
    assert history_of(items[:1]) == History(seen=[], step=1)


def test_partial_token_fields_are_a_bad_request() -> None:
    broken = Item(type="message", role="assistant", prompt_token_ids=[1], generation_token_ids=[2])
    with pytest.raises(BadRequest, match="input item 1 carries incomplete token fields"):
        history_of([Item(role="user", content="q"), broken])


def test_a_prompt_that_extends_the_history_is_used_as_rendered() -> None:
    assert continue_prompt(History(seen=[1, 2, 3, 9], step=2), [1, 2, 3, 9, 7, 8]) == [1, 2, 3, 9, 7, 8]


def test_a_drifted_rendering_is_rebuilt_from_the_token_ids() -> None:
    # The model generated [3, 4] then its end token 9; re-rendered text tokenizes as [34].
    seen = [1, 9, 2, 3, 4, 9]
    templated = [1, 9, 2, 34, 9, 5, 6]
    assert continue_prompt(History(seen=seen, step=2), templated) == [*seen, 5, 6]


def test_a_history_that_cannot_be_continued_names_the_call() -> None:
    with pytest.raises(BadRequest, match="model call 3: .* model call 2"):
        continue_prompt(History(seen=[1, 2, 3, 9], step=3), [1, 2, 4, 5])


def test_generation_ids_and_logprobs_must_agree() -> None:
    entries = [("token_id:4", -0.1), ("token_id:9", -0.2)]
    assert generation_of([4, 9], entries, "call") == ([4, 9], [-0.1, -0.2])
    assert generation_of(None, entries, "call") == ([4, 9], [-0.1, -0.2])
    with pytest.raises(FunctionFailed, match="do not match"):
        generation_of([4, 8], entries, "call")
    with pytest.raises(FunctionFailed, match="do not match"):
        generation_of([4, 9], [("4", -0.1), ("9", -0.2)], "call")
    with pytest.raises(FunctionFailed, match="no token ids"):
        generation_of(None, [], "model call 1")


def test_tokens_go_on_the_last_output_item_only() -> None:
    response = Response(
        id="r", created_at=0, model="m", output=[Item(type="reasoning"), Item(type="message")]
    )
    tagged = with_tokens(response, CallTokens([1], [2, 3], [-1.0, -2.0]))
    assert not isinstance(tagged.output[0].prompt_token_ids, list)
    assert tagged.output[1].generation_token_ids == [2, 3]
    empty = Response(id="r", created_at=0, model="m", output=[])
    assert with_tokens(empty, CallTokens([1], [], [])).output == []


def test_rollouts_spread_over_servers_and_move_only_when_theirs_is_down() -> None:
    now = [0.0]
    servers = Servers(["http://a/v1", "http://b/v1", "http://c/v1"], cooldown=30, clock=lambda: now[0])
    first = {f"rollout-{index}": servers.order(f"rollout-{index}")[0] for index in range(600)}
    assert all(150 < count < 250 for count in Counter(first.values()).values())
    servers.failed("http://b/v1")
    moved = {key: servers.order(key)[0] for key in first}
    assert {key for key in first if moved[key] != first[key]} == {
        key for key, url in first.items() if url == "http://b/v1"
    }
    now[0] = 31.0
    assert {key: servers.order(key)[0] for key in first} == first


def test_a_rollout_keeps_its_key_across_calls() -> None:
    first = params({"role": "user", "content": "q"})
    later = params(
        {"role": "user", "content": "q"}, {"type": "function_call_output", "call_id": "c", "output": "o"}
    )
    assert _rollout_key(first) == _rollout_key(later)
    assert _rollout_key(params({"role": "user", "content": "q"}, prompt_cache_key="session-7")) == "session-7"


def test_urls_and_the_adapter_choice() -> None:
    servers = ModelOptions(base_url=" http://a:8000/v1/, http://b:8000/v1 ,").servers
    assert servers == ["http://a:8000/v1", "http://b:8000/v1"]
    assert policy_adapter(ModelOptions(base_url="http://a/v1", api="vllm")) == "vllm"
    assert policy_adapter(ModelOptions(base_url="http://a/v1", api="chat")) == "openai"
    assert policy_adapter(ModelOptions(api="vllm")) == "offline"
