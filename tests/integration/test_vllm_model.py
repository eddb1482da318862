"""The `vllm` model function served on the bus: a rollout's calls share its session as
their `prompt_cache_key`, a 5xx from the server is retried, and a server that returns no
token ids fails the rollout with a reason (stub server: `tests/vllm_stub.py`)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from gymbus import bus
from gymbus.bus import Connection, environment_service, model_service
from gymbus.bus.hosting import run_rollout
from gymbus.functions import MemoryState, ModelOptions
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.models.vllm_model import VLLMModel
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import Response, ResponsesCreateParams
from tests.conftest import WEATHER, WEATHER_AGENT
from tests.vllm_stub import GENERATION, VllmStub, serve_stub


@pytest.fixture(scope="module")
def stub_server() -> Iterator[tuple[VllmStub, str]]:
    yield from serve_stub()


@pytest.fixture
async def vllm(stub_server: tuple[VllmStub, str]) -> AsyncIterator[tuple[VllmStub, VLLMModel]]:
    stub, url = stub_server
    stub.reset()
    model = VLLMModel(ModelOptions(base_url=url, model="stub", api="vllm"))
    yield stub, model
    await model.aclose()


async def rollout(nc: Connection, row: bytes) -> dict[str, object]:
    return json.loads(await run_rollout(nc, AGENTS[WEATHER_AGENT], row, time.time() + 60))  # type: ignore[no-any-return]


async def test_a_rollouts_model_calls_carry_its_session_as_cache_key(
    host: bus.ServiceHost, nc: Connection, weather_rows: list[bytes]
) -> None:
    keys: list[object] = []

    async def recording(params: ResponsesCreateParams) -> Response:
        keys.append(params.prompt_cache_key)
        return await offline_policy(params)

    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    await host.add(model_service("recording", "policy", recording))
    await rollout(nc, weather_rows[0])
    await rollout(nc, weather_rows[0])
    assert len(keys) == 4 and keys[0] == keys[1] != keys[2] == keys[3] and isinstance(keys[0], str)
    row = json.loads(weather_rows[0])
    row["responses_create_params"]["prompt_cache_key"] = "mine"
    await rollout(nc, json.dumps(row).encode())
    assert keys[4:] == ["mine", "mine"]


async def test_a_5xx_is_retried_and_a_missing_token_id_fails_the_rollout(
    host: bus.ServiceHost, nc: Connection, weather_rows: list[bytes], vllm: tuple[VllmStub, VLLMModel]
) -> None:
    stub, model = vllm
    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    await host.add(model_service("vllm", "policy", model))
    stub.fail_next, stub.status = 1, 503
    row = await rollout(nc, weather_rows[0])
    assert "_ng_failure_class" not in row and row["_gymbus"]["model_retries"] == 1
    assert row["response"]["output"][-1]["generation_token_ids"] == GENERATION
    stub.token_ids = False
    row = await rollout(nc, weather_rows[0])
    assert row["_ng_failure_class"] == "model_failed" and "no token ids" in row["_ng_failure_message"]
    assert row["_gymbus"]["model_retries"] == 0
