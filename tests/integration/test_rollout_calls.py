"""One rollout over the bus: retries of transient failures, counted; permanent ones fail it."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from nats.aio.msg import Msg

from gymbus import bus, schemas
from gymbus.bus import Connection, environment_service, model_service
from gymbus.bus.hosting import BusModels, agent_service, run_rollout
from gymbus.functions import MemoryState
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import Response, ResponsesCreateParams
from tests.conftest import WEATHER, WEATHER_AGENT


def flaky(failures: list[schemas.GymError]):  # type: ignore[no-untyped-def]
    async def generate(params: ResponsesCreateParams) -> Response:
        if failures:
            raise failures.pop(0)
        return await offline_policy(params)

    return generate


async def rollout(nc: Connection, row: bytes) -> dict[str, object]:
    return json.loads(await run_rollout(nc, AGENTS[WEATHER_AGENT], row, time.time() + 60))  # type: ignore[no-any-return]


async def test_transient_model_failures_are_retried_and_counted(
    host: bus.ServiceHost, nc: Connection, weather_rows: list[bytes]
) -> None:
    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    failures: list[schemas.GymError] = [
        schemas.UpstreamFailed("HTTP 429"),
        schemas.UpstreamFailed("HTTP 500"),
    ]
    await host.add(model_service("flaky", "policy", flaky(failures)))
    row = await rollout(nc, weather_rows[0])
    assert row["reward"] == 1.0 and "_ng_failure_class" not in row
    stats = {"attempt": 0, "delivery": 1, "model_retries": 2, "call_retries": 0, "restarts": 0}
    assert row["_gymbus"] == stats


async def test_a_permanent_model_failure_fails_the_rollout_without_retries(
    host: bus.ServiceHost, nc: Connection, weather_rows: list[bytes]
) -> None:
    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    await host.add(model_service("rejecting", "policy", flaky([schemas.BadRequest("HTTP 401: bad key")] * 5)))
    row = await rollout(nc, weather_rows[0])
    assert row["_ng_failure_class"] == "model_failed" and row["reward"] == 0.0
    assert "HTTP 401" in str(row["_ng_failure_message"])
    assert row["_gymbus"]["model_retries"] == 0  # type: ignore[index]


async def test_an_invented_tool_name_is_answered_at_once(host: bus.ServiceHost, nc: Connection) -> None:
    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    await host.add(model_service("offline", "policy", offline_policy))
    row = json.dumps({"responses_create_params": {"input": "weather in sf?", "tools": [
        {"type": "function", "name": "get_forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]}}).encode()  # fmt: skip
    started = time.monotonic()
    result = await rollout(nc, row)
    assert time.monotonic() - started < 2
    output = result["response"]["output"]  # type: ignore[index]
    assert output[1]["output"] == '{"detail":"Not Found"}'  # what a NeMo Gym server answers it
    assert result["_gymbus"]["call_retries"] == 0  # type: ignore[index]


async def test_garbage_to_an_agent_is_a_bad_request_and_it_keeps_serving(
    weather_functions: bus.ServiceHost, nc: Connection, weather_rows: list[bytes]
) -> None:
    await weather_functions.add(agent_service(nc, AGENTS[WEATHER_AGENT]))
    subject = bus.subjects.agent_run(WEATHER_AGENT)
    for garbage in (
        b"\x00\xff",
        b"[]",
        b'{"responses_create_params": {"input": 3}}',
        b"x" * (4 * 1024 * 1024),
    ):
        msg = await nc.client.request(subject, garbage, timeout=10)
        assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400"
    reply = json.loads(await bus.request(nc, subject, weather_rows[0], timeout=10))
    assert reply["reward"] == 1.0


async def test_garbage_to_every_environment_and_model_subject_gets_a_structured_error(
    weather_functions: bus.ServiceHost, nc: Connection
) -> None:
    subjects = [
        bus.subjects.env_seed(WEATHER),
        bus.subjects.env_verify(WEATHER),
        bus.subjects.env_tool(WEATHER, "get_weather"),
        bus.subjects.model_responses("policy"),
    ]
    for subject in subjects:
        for garbage in (b"\xde\xad\xbe\xef", b"[1]", b'{"responses_create_params": 1}', b"{" * 500_000):
            msg = await nc.client.request(subject, garbage, timeout=10)
            assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400", subject
            assert json.loads(msg.data)["error"]["type"] == "bad_request"
    reply = await bus.request(
        nc, bus.subjects.env_tool(WEATHER, "get_weather"), b'{"city": "Lima"}', timeout=5
    )
    assert b"Lima" in reply


async def count_requests(nc: Connection, subject: str) -> list[bytes]:
    """A subscriber on `subject` that records each request and never answers it."""
    seen: list[bytes] = []

    async def record(msg: Msg) -> None:
        seen.append(msg.data)

    await nc.client.subscribe(subject, cb=record)
    await nc.client.flush()
    return seen


async def test_an_environments_model_call_is_not_retried_past_the_rollout_deadline(nc: Connection) -> None:
    seen = await count_requests(nc, bus.subjects.model_responses("slow_judge"))
    timeouts = replace(schemas.DEFAULT_TIMEOUTS, model=0.2)
    expired = {schemas.SESSION: "s1", schemas.DEADLINE: f"{time.time() - 1:.3f}"}
    params = ResponsesCreateParams(input="same answer?")
    with pytest.raises(schemas.RequestTimeout):
        await BusModels(nc, expired, timeouts).generate("slow_judge", params)
    assert len(seen) == 1  # without the deadline, MODEL_RETRY tries 8 times over about 50 s


async def test_a_judge_nobody_serves_fails_before_the_rollout_deadline(nc: Connection) -> None:
    deadline = time.time() + 1.0
    headers = {schemas.SESSION: "s1", schemas.DEADLINE: f"{deadline:.3f}"}
    with pytest.raises(schemas.NoResponders):
        await BusModels(nc, headers, schemas.DEFAULT_TIMEOUTS).generate(
            "absent_judge", ResponsesCreateParams(input="x")
        )
    assert time.time() < deadline + schemas.MODEL_RETRY.cap  # not after MODEL_RETRY's ~50 s of waits
