"""The service host against a real nats-server: concurrency, errors as values, Services API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import pytest

from gymbus import bus, schemas
from gymbus.bus import Connection, Endpoint, ServiceHost, ServiceSpec


def spec(
    name: str, handler: bus.Handler, subject: str | None = None, max_in_flight: int = 1024
) -> ServiceSpec:
    endpoint = Endpoint("call", subject or f"test.{name}", handler, max_in_flight=max_in_flight)
    return ServiceSpec(name, "environment", (endpoint,))


async def test_slow_handlers_run_concurrently(host: ServiceHost, nc: Connection) -> None:
    async def slow(data: bytes, headers: Mapping[str, str]) -> bytes:
        await asyncio.sleep(0.2)
        return data

    await host.add(spec("slow", slow))
    started = time.monotonic()
    replies = await asyncio.gather(*(bus.request(nc, "test.slow", b"%d" % i, timeout=5) for i in range(50)))
    assert replies == [b"%d" % i for i in range(50)]
    assert time.monotonic() - started < 2.0  # 50 × 0.2 s one at a time would take 10 s


async def test_in_flight_is_bounded_per_endpoint(host: ServiceHost, nc: Connection) -> None:
    running = 0
    peak = 0

    async def counted(data: bytes, headers: Mapping[str, str]) -> bytes:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return b"ok"

    await host.add(spec("bounded", counted, max_in_flight=4))
    await asyncio.gather(*(bus.request(nc, "test.bounded", b"", timeout=5) for _ in range(20)))
    assert peak == 4


async def test_a_crashing_function_answers_an_error_and_keeps_serving(
    host: ServiceHost, nc: Connection
) -> None:
    async def flaky(data: bytes, headers: Mapping[str, str]) -> bytes:
        if data == b"crash":
            raise ZeroDivisionError("secret internal detail")
        return b"fine"

    await host.add(spec("flaky", flaky))
    with pytest.raises(schemas.FunctionFailed) as failure:
        await bus.request(nc, "test.flaky", b"crash", timeout=5)
    assert "ZeroDivisionError" in failure.value.message
    assert "secret internal detail" not in failure.value.message  # no repr of exceptions on the wire
    assert await bus.request(nc, "test.flaky", b"ok", timeout=5) == b"fine"


async def test_garbage_gets_a_structured_error_and_the_worker_keeps_serving(
    weather_functions: ServiceHost, nc: Connection
) -> None:
    subject = bus.subjects.env_tool("example_single_tool_call", "get_weather")
    for garbage in (b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"city": 42}', b"", b"{" * 10000):
        msg = await nc.client.request(subject, garbage, timeout=5)
        assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400"
        assert b'"type":"bad_request"' in msg.data
    reply = await bus.request(nc, subject, b'{"city": "Oslo"}', timeout=5)
    assert b"The weather in Oslo is cold." in reply


async def test_nobody_serving_is_told_apart_from_slow(nc: Connection, host: ServiceHost) -> None:
    with pytest.raises(schemas.NoResponders):
        await bus.request(nc, "test.nobody.here", b"", timeout=5)

    async def never(data: bytes, headers: Mapping[str, str]) -> bytes:
        await asyncio.sleep(1.0)
        return b""

    await host.add(spec("never", never))
    with pytest.raises(schemas.RequestTimeout):
        await bus.request(nc, "test.never", b"", timeout=0.2)


async def test_expired_work_is_dropped_not_done(host: ServiceHost, nc: Connection) -> None:
    calls = 0

    async def work(data: bytes, headers: Mapping[str, str]) -> bytes:
        nonlocal calls
        calls += 1
        return b"done"

    await host.add(spec("deadline", work))
    with pytest.raises(schemas.DeadlineExceeded):
        await bus.request(
            nc, "test.deadline", b"", timeout=5, headers={schemas.DEADLINE: str(time.time() - 1)}
        )
    assert calls == 0


async def test_bodies_over_the_max_payload_travel_by_claim_check(host: ServiceHost, nc: Connection) -> None:
    async def double(data: bytes, headers: Mapping[str, str]) -> bytes:
        return data + data

    await host.add(spec("huge", double))
    body = bytes(range(256)) * (nc.client.max_payload // 256 + 1)  # just over the limit, both ways
    reply = await bus.request(nc, "test.huge", body, timeout=60)
    assert reply == body + body


async def test_services_api_reports_endpoints_and_counts(host: ServiceHost, nc: Connection) -> None:
    async def echo(data: bytes, headers: Mapping[str, str]) -> bytes:
        if data == b"bad":
            raise schemas.BadRequest("bad input")
        return data

    await host.add(spec("echo_stats", echo))
    for body in (b"a", b"b", b"bad"):
        try:
            await bus.request(nc, "test.echo_stats", body, timeout=5)
        except schemas.BadRequest:
            pass
    [stats] = await bus.service_stats(nc, "echo_stats")
    [endpoint] = stats.endpoints
    assert (endpoint.subject, endpoint.queue_group) == ("test.echo_stats", "echo_stats")
    assert (endpoint.num_requests, endpoint.num_errors) == (3, 1)
    assert endpoint.last_error == "400:bad input"
    [info] = await bus.service_infos(nc, "echo_stats")
    assert info.metadata["kind"] == "environment"
    ping = await nc.client.request("$SRV.PING.echo_stats", b"", timeout=2)
    assert b"io.nats.micro.v1.ping_response" in ping.data


async def test_replicas_in_one_queue_group_share_the_load(nats_url: str, nc: Connection) -> None:
    seen: list[str] = []
    hosts = []
    for replica in ("a", "b"):
        client = await bus.connect(nats_url, name=replica)

        async def handler(data: bytes, headers: Mapping[str, str], replica: str = replica) -> bytes:
            seen.append(replica)
            return b""

        worker = ServiceHost(client)
        await worker.add(spec("shared", handler))
        hosts.append((worker, client))
    await asyncio.gather(*(bus.request(nc, "test.shared", b"", timeout=5) for _ in range(200)))
    for worker, client in hosts:
        await worker.stop()
        await client.close()
    assert len(seen) == 200
    assert seen.count("a") > 40 and seen.count("b") > 40


async def test_stop_lets_in_flight_requests_finish(nc: Connection, nats_url: str) -> None:
    client = await bus.connect(nats_url, name="stopping")

    async def slow(data: bytes, headers: Mapping[str, str]) -> bytes:
        await asyncio.sleep(0.3)
        return b"finished"

    worker = ServiceHost(client)
    await worker.add(spec("stopping", slow))
    pending = asyncio.create_task(bus.request(nc, "test.stopping", b"", timeout=5))
    await asyncio.sleep(0.05)
    await worker.stop()
    assert await pending == b"finished"
    with pytest.raises(schemas.NoResponders):
        await bus.request(nc, "test.stopping", b"", timeout=1)
    await client.close()


async def test_a_slow_worker_keeps_its_requester_waiting_with_keepalives(
    nc: Connection, nats_url: str
) -> None:
    client = await bus.connect(nats_url, name="slow")

    async def slow(data: bytes, headers: Mapping[str, str]) -> bytes:
        await asyncio.sleep(2.0)
        return b"done"

    worker = ServiceHost(client, schemas.Timeouts(keepalive=0.2))
    await worker.add(spec("slow_beats", slow))
    try:
        assert await bus.request(nc, "test.slow_beats", b"", timeout=30, silence=1.0) == b"done"
    finally:
        await worker.stop()
        await client.close()


async def test_a_worker_that_dies_mid_request_is_noticed_within_the_silence_limit(nc: Connection) -> None:
    async def swallow(msg):  # type: ignore[no-untyped-def]
        pass  # received, then "died": no reply and no keep-alive ever comes

    sub = await nc.client.subscribe("test.dies", cb=swallow)
    started = time.monotonic()
    with pytest.raises(schemas.RequestTimeout, match="no sign of work"):
        await bus.request(nc, "test.dies", b"", timeout=60, silence=1.0)
    assert time.monotonic() - started < 5
    await sub.unsubscribe()
