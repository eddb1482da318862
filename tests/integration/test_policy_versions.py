"""Every model call of a policy under training names the policy's current version and
records it: the `vllm` model function against a real vLLM server holding LoRA adapters.

Adapters here are loaded into the server directly (its `/v1/load_lora_adapter`); their
delivery over the bus is `test_adapter_delivery.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus
from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.functions.models.vllm_model import VLLMModel
from gymbus.schemas import (
    POLICY_KEY,
    PolicyRecord,
    Response,
    ResponsesCreateParams,
    UpstreamFailed,
    adapter_name,
)
from tests.integration.test_trainer import Fleet
from tests.lora import SAME_WEIGHTS, make_adapter
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import MODEL_NAME, VllmServer

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

pytestmark = pytest.mark.timeout(600)

POLICY = "policy.t1a2b3c4"
INCARNATION = "p1"


def load(server: VllmServer, name: str, path: Path) -> None:
    """Load an adapter into the server directly, as an operator would."""
    body = json.dumps({"lora_name": name, "lora_path": str(path)}).encode()
    request = urllib.request.Request(
        f"{server.root}/v1/load_lora_adapter", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        assert reply.status == 200


@pytest.fixture(scope="module")
def adapters(lora_vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Versions 1 and 2 of the policy, loaded into the server."""
    directory = tmp_path_factory.mktemp("adapters")
    made = {version: make_adapter(directory / f"v{version}", seed=version) for version in (1, 2)}
    for version, path in made.items():
        load(lora_vllm_server, adapter_name(POLICY, INCARNATION, version), path)
    return made


@pytest.fixture(scope="module")
def hf() -> Iterator[dict[str, Any]]:
    from transformers import AutoModelForCausalLM

    models: dict[str, Any] = {"base": AutoModelForCausalLM.from_pretrained(tiny_model_dir()).eval()}
    yield models


def logprobs_under(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        return (
            torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()
        )


def with_adapter(path: Path) -> Any:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir()), path).eval()


def request(policy: str | None) -> ResponsesCreateParams:
    metadata = {POLICY_KEY: policy} if policy else None
    return ResponsesCreateParams(
        input="what is the weather in paris",
        max_output_tokens=12,
        temperature=1.0,
        top_p=1.0,
        metadata=metadata,
    )


def last_call(response: Response) -> tuple[list[int], list[int], list[float], Any]:
    item = response.output[-1]
    assert isinstance(item.prompt_token_ids, list) and isinstance(item.generation_token_ids, list)
    assert isinstance(item.generation_log_probs, list)
    return item.prompt_token_ids, item.generation_token_ids, item.generation_log_probs, item.policy_version


async def test_a_call_naming_a_policy_generates_from_its_current_adapter_and_records_the_version(
    lora_vllm_server: VllmServer, adapters: dict[int, Path], hf: dict[str, Any]
) -> None:
    current = {POLICY: (adapter_name(POLICY, INCARNATION, 1), 1)}
    model = VLLMModel(
        ModelOptions(base_url=lora_vllm_server.url, model=MODEL_NAME, policy_versions=current.get)
    )
    try:
        first = last_call(await model(request(POLICY)))
        current[POLICY] = (adapter_name(POLICY, INCARNATION, 2), 2)
        second = last_call(await model(request(POLICY)))
        base = last_call(await model(request(None)))
    finally:
        await model.aclose()
    assert first[3] == 1 and second[3] == 2 and base[3] is msgspec.UNSET
    # The server generated from the very adapter the version names: its logprobs are that
    # adapter's (HF + PEFT), far from the other version's and the base model's.
    for (prompt, generation, logprobs, _), version in ((first, 1), (second, 2)):
        expected = logprobs_under(with_adapter(adapters[version]), prompt, generation)
        base_model = logprobs_under(hf["base"], prompt, generation)
        other = logprobs_under(with_adapter(adapters[3 - version]), prompt, generation)
        assert max(abs(a - b) for a, b in zip(logprobs, other, strict=True)) > 1e-2
        assert max(abs(a - b) for a, b in zip(logprobs, expected, strict=True)) < SAME_WEIGHTS
        assert max(abs(a - b) for a, b in zip(logprobs, base_model, strict=True)) > 1e-2
    prompt, generation, logprobs, _ = base
    expected = logprobs_under(hf["base"], prompt, generation)
    assert max(abs(a - b) for a, b in zip(logprobs, expected, strict=True)) < SAME_WEIGHTS


async def test_a_version_no_server_holds_fails_as_transient_and_never_falls_back_to_the_base_model(
    lora_vllm_server: VllmServer, adapters: dict[int, Path]
) -> None:
    versions = {POLICY: (adapter_name(POLICY, INCARNATION, 9), 9)}
    model = VLLMModel(
        ModelOptions(base_url=lora_vllm_server.url, model=MODEL_NAME, policy_versions=versions.get)
    )
    try:
        with pytest.raises(UpstreamFailed) as lacking:
            await model(request(POLICY))
        with pytest.raises(UpstreamFailed) as unpublished:
            await model(request("policy.never"))
    finally:
        await model.aclose()
    print(lacking.value.message)
    assert f"no model server holds adapter {adapter_name(POLICY, INCARNATION, 9)}" in lacking.value.message
    assert lacking.value.transient  # the agent tries again: its syncer may be loading it
    assert "policy policy.never has no version on its servers yet" in unpublished.value.message


def test_a_model_worker_on_the_bus_follows_the_policys_current_version(
    lora_vllm_server: VllmServer, adapters: dict[int, Path], tmp_path: Path
) -> None:
    server = bus.EmbeddedServer()
    url = server.start()
    fleet = Fleet(url, tmp_path / "workers.log")
    policy = ModelOptions(base_url=lora_vllm_server.url, model=MODEL_NAME, api="vllm")
    try:
        asyncio.run(_set_current(url, 1))
        fleet.start(ServeOptions(functions=("vllm",), model=policy), ["policy"])
        versions = asyncio.run(_calls_until(url, 1))
        asyncio.run(_set_current(url, 2))
        versions += asyncio.run(_calls_until(url, 2))
    finally:
        fleet.stop()
        server.stop()
    print(f"versions the calls named: {versions}")
    assert versions[0] == 1 and versions[-1] == 2 and set(versions) == {1, 2}


async def _set_current(url: str, version: int) -> None:
    nc = await bus.connect(url, name="test")
    try:
        records = await bus.policy.policy_records(nc)
        record = PolicyRecord(policy=POLICY, incarnation=INCARNATION, current=version)
        await records.put(POLICY, msgspec.json.encode(record))
    finally:
        await nc.close()


async def _calls_until(url: str, version: int) -> list[Any]:
    """The versions calls recorded, until one names `version` (the worker hears of a change
    within milliseconds)."""
    nc = await bus.connect(url, name="test")
    seen: list[Any] = []
    try:
        while version not in seen and len(seen) < 50:
            body = msgspec.json.encode(request(POLICY))
            reply = await bus.request(nc, "gym.model.policy.responses", body, timeout=60)
            seen.append(msgspec.json.decode(reply, type=Response).output[-1].policy_version)
    finally:
        await nc.close()
    return seen
