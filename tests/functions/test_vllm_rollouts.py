"""The `vllm` model function against a real vLLM server on the tiny model: rollouts of real
agents and environments come back with token ids that stitch into one contiguous sequence,
and logprobs equal to the Hugging Face forward pass of the same weights.

The random model writes what the steering regex allows (`tests/vllm_steering.py`): an
optional `<think>` block, then a Hermes tool call or "ok". Which one, and the city, are the
model's own random choices under a request seed; a test scans a few seeds for a rollout of
the shape it needs and checks every rollout it ran.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus.functions import ModelOptions
from gymbus.functions.agents.multi_turn_agent import multi_turn_agent
from gymbus.functions.agents.simple_agent import simple_agent
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.models.vllm_model import VLLMModel
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import ResponsesCreateParams
from tests.functions.local_calls import LocalCalls
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import MODEL_NAME, VllmServer

pytestmark = pytest.mark.timeout(900)  # the first test also waits for the server to start

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
STEER = (
    r"(<think>[a-z ]{1,8}</think>)?"
    r'(<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]{1,8}"\}\}\n</tool_call>|ok)'
)
TOLERANCE = 1e-4


def steered(row: dict[str, Any], seed: int) -> bytes:
    """`row` with the steering regex and a sampling seed for the model, as a task row."""
    params = row["responses_create_params"]
    extra = {"seed": seed, "vllm_xargs": {"gymbus_regex": STEER}}
    params.update(metadata={"extra_body": json.dumps(extra)}, max_output_tokens=200, temperature=1.0)
    return json.dumps(row).encode()


def example_row(name: str) -> dict[str, Any]:
    return dict(json.loads((EXAMPLES / f"{name}.jsonl").read_text().splitlines()[0]))


@pytest.fixture
async def policy(vllm_server: VllmServer) -> AsyncIterator[VLLMModel]:
    model = VLLMModel(ModelOptions(base_url=vllm_server.url, model=MODEL_NAME, api="vllm"))
    yield model
    await model.aclose()


@pytest.fixture(scope="module")
def hf_model() -> Iterator[Any]:
    import torch
    from transformers import AutoModelForCausalLM

    yield AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32).eval()


def model_calls(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items that close a model call (they carry its token ids), in order."""
    return [item for item in output if "generation_token_ids" in item]


def assert_contiguous(calls: list[dict[str, Any]]) -> None:
    seen: list[int] = []
    for step, call in enumerate(calls, 1):
        assert call["prompt_token_ids"][: len(seen)] == seen, (
            f"model call {step} does not extend the ones before"
        )
        assert len(call["generation_log_probs"]) == len(call["generation_token_ids"])
        seen = call["prompt_token_ids"] + call["generation_token_ids"]


def logprob_error(hf_model: Any, calls: list[dict[str, Any]]) -> float:
    """The largest |vLLM logprob - HF logprob| over every generated token of `calls`."""
    import torch

    worst = 0.0
    for call in calls:
        prompt, generation = call["prompt_token_ids"], call["generation_token_ids"]
        with torch.no_grad():
            logits = hf_model(torch.tensor([prompt + generation])).logits[0]
        expected = torch.log_softmax(logits.float(), dim=-1)[len(prompt) - 1 : -1]
        reference = expected.gather(1, torch.tensor(generation)[:, None])[:, 0]
        worst = max(worst, float((reference - torch.tensor(call["generation_log_probs"])).abs().max()))
    return worst


async def weather_rollout(policy: VLLMModel, seed: int) -> dict[str, Any]:
    env = ENVIRONMENTS["example_single_tool_call"]
    calls = LocalCalls(env, session=f"weather-{seed}", policy=policy)
    return dict(json.loads(await simple_agent(steered(example_row(env.name), seed), calls, 4)))


async def test_a_multi_step_weather_rollout_has_exact_tokens(policy: VLLMModel, hf_model: Any) -> None:
    shapes, worst = [], 0.0
    for seed in range(8):
        output = (await weather_rollout(policy, seed))["response"]["output"]
        calls = model_calls(output)
        assert_contiguous(calls)
        worst = max(worst, logprob_error(hf_model, calls))
        shapes.append([item["type"] for item in output])
        if len(calls) >= 2 and output[-1]["type"] == "message":
            break
    print(f"weather rollouts {shapes}; logprob max abs diff vs HF {worst:.2e}")
    assert worst <= TOLERANCE
    assert len(calls) >= 2 and "function_call_output" in shapes[-1] and output[-1]["type"] == "message", (
        shapes
    )
    assert policy.rebuilt_prompts >= 1  # the random model's text never tokenizes back to its ids


async def test_a_two_turn_conversation_has_exact_tokens(policy: VLLMModel, hf_model: Any) -> None:
    env = ENVIRONMENTS["example_multi_turn"]
    for seed in range(8):
        row = {**example_row(env.name), "max_user_turns": 1}
        calls = LocalCalls(
            env, session=f"multi-{seed}", policy=policy, others={"user_simulator": offline_policy}
        )
        rollout = json.loads(await multi_turn_agent(steered(row, seed), calls, 4))
        output = rollout["response"]["output"]
        user_turns = [index for index, item in enumerate(output) if item.get("role") == "user"]
        tokens = model_calls(output)
        assert_contiguous(tokens)
        error = logprob_error(hf_model, tokens)
        assert error <= TOLERANCE
        if rollout["simulated_user_turns"] == 1 and model_calls(output[user_turns[0] :]):
            break
    print(f"two-turn rollout: {[item['type'] for item in output]}; logprob max abs diff vs HF {error:.2e}")
    assert rollout["simulated_user_turns"] == 1, "no seed gave a policy reply the simulator could answer"
    assert model_calls(output[: user_turns[0]]) and model_calls(output[user_turns[0] :])


async def test_a_history_the_server_renders_the_same_goes_through_chat_completions(
    policy: VLLMModel, vllm_server: VllmServer
) -> None:
    import aiohttp

    messages = [{"role": "user", "content": "what is the weather in paris"}]
    answer = {"role": "assistant", "content": "it is cold"}
    async with aiohttp.ClientSession() as http:

        async def tokenize(conversation: list[dict[str, str]], generation_prompt: bool) -> list[int]:
            body = {"model": MODEL_NAME, "messages": conversation, "add_generation_prompt": generation_prompt}
            async with http.post(f"{vllm_server.root}/tokenize", json=body) as reply:
                return list((await reply.json())["tokens"])

        prompt = await tokenize(messages, True)
        generation = (await tokenize([*messages, answer], False))[len(prompt) : -1]  # up to its end token
    first = {"type": "message", "role": "assistant", "content": answer["content"], "prompt_token_ids": prompt,
             "generation_token_ids": generation, "generation_log_probs": [-1.0] * len(generation)}  # fmt: skip
    row = {"responses_create_params": {"input": [*messages, first, {"role": "user", "content": "and tokyo"}]}}
    params = json.loads(steered(row, 0))["responses_create_params"]
    response = await policy(msgspec.convert(params, ResponsesCreateParams))
    [call] = model_calls(msgspec.to_builtins(response.output))
    assert call["prompt_token_ids"][: len(prompt) + len(generation)] == prompt + generation
    assert policy.rebuilt_prompts == 0
