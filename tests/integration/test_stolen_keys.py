"""What one stolen key can do on a bus locked by `gym-runner secure init`, enforced by a real
nats-server: the producer's key cannot purge the claim store, write into another role's
bodies, read them, or write past the store's bound, while a collection of 10 MB rows runs
on and loses nothing; an environment's key cannot publish into the runner's inbox space;
no key can make a service publish on a subject of its choosing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest
from nats.js import JetStreamContext

from bench import faults
from bench._cluster import WEATHER, WEATHER_AGENT, NatsServers, tally, wait_until
from gymbus import bus, schemas
from gymbus.bus import Connection
from gymbus.runner.security._secure import SecureLayout, secure_init

pytestmark = pytest.mark.timeout(240)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
AGENT_ROLE = f"agent-{WEATHER_AGENT}"
ENV_ROLE = f"env-{WEATHER}"
BOUND = 256 * 1024 * 1024  # the claim store's bound here: room for a few 10 MB rollouts at once
ROWS = 20


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServers, SecureLayout]]:
    work = tmp_path_factory.mktemp("stolen")
    layout = secure_init(work / "secrets", [WEATHER], [], ["policy"])
    authorization = layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(work, size=1, extra="authorization" + authorization) as servers:
        yield servers, layout


def _env(url: str, nkey: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    return {**clean, "NATS_URL": url, "NATS_NKEY": str(nkey)}


async def _connect(servers: NatsServers, layout: SecureLayout, role: str) -> Connection:
    auth = bus.BusAuth(nkey=layout.credentials[role])
    return await bus.connect(servers.url(0), name=role, auth=auth, role=role)


def _identity(layout: SecureLayout, role: str) -> str:
    return bus.security.inbox_prefix_for(bus.BusAuth(nkey=layout.credentials[role])).removeprefix("_INBOX.")


async def _refused(nc: Connection, call: Awaitable[object], subject: str) -> None:
    """`call` (a JetStream request or a publish) is refused by the server: it times out or
    returns, and the server reports a permissions violation on `subject`."""
    try:
        await call
    except (TimeoutError, nats.errors.Error):
        pass
    with pytest.raises(schemas.NotAuthorized, match=re.escape(subject.lower())):  # nats-py lower-cases it
        await bus.connection.check_permitted(nc, [subject.lower()], "attacker")


def _big_rows(directory: Path) -> tuple[Path, set[tuple[int, int]]]:
    """`ROWS` weather rows, each carrying a 10 MB conversation before its question."""
    row = json.loads(faults.EXAMPLE.read_text().splitlines()[0])
    history = [{"role": "user", "content": "y" * 100_000} for _ in range(100)]
    row["responses_create_params"]["input"] = history + row["responses_create_params"]["input"]
    source = directory / "big.jsonl"
    source.write_text("".join(json.dumps({**row, "row": task}) + "\n" for task in range(ROWS)))
    return source, {(task, 0) for task in range(ROWS)}


def _worker(function: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([*RUNNER, "serve", function], env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_producer_key_cannot_wipe_read_forge_or_overfill_claims_while_a_collection_runs(
    secured: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, layout = secured
    url, creds = servers.url(0), layout.credentials
    asyncio.run(_make_store(servers, layout))  # the operator sizes it; the runner accepts it
    workers = [
        _worker(WEATHER, _env(url, creds[ENV_ROLE]), tmp_path / "env.log"),
        _worker(WEATHER_AGENT, _env(url, creds[AGENT_ROLE]), tmp_path / "agent.log"),
        _worker("offline", _env(url, creds["model-policy"]), tmp_path / "model.log"),
    ]
    runner: subprocess.Popen[bytes] | None = None
    try:
        for log in ("env.log", "agent.log", "model.log"):
            wait_until(lambda log=log: "ready:" in (tmp_path / log).read_text(errors="replace"), 60, log)
        source, keys = _big_rows(tmp_path)
        out = tmp_path / "out.jsonl"
        with open(tmp_path / "runner.log", "wb") as log:
            runner = subprocess.Popen(
                [*RUNNER, "collect", "-i", str(source), "-o", str(out), "--agent", WEATHER_AGENT,
                 "--concurrency", "2"],
                env=_env(url, creds["runner"]), stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        stored = asyncio.run(_attack_as_producer(servers, layout, out))
        assert runner.poll() is None, "the collection ended before the attack did"
        assert runner.wait(180) == 0, (tmp_path / "runner.log").read_text()[-3000:]
    finally:
        for process in (*workers, *([runner] if runner is not None else [])):
            _stop(process)
    assert stored <= BOUND
    result = tally(out, keys)
    assert (result.written, result.lost, result.duplicated, result.failed) == (ROWS, 0, 0, 0)
    assert min(len(line) for line in out.read_bytes().splitlines()) > 10_000_000
    names = ("gym-runner collect", f"gym-worker:{WEATHER}", "gym-worker:offline")
    refused = [
        line for line in servers.log(0).splitlines() if "Violation" in line and any(n in line for n in names)
    ]
    assert not refused  # every legitimate role had what it needed


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s: a failed test leaves nothing running."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def _make_store(servers: NatsServers, layout: SecureLayout) -> None:
    admin = await _connect(servers, layout, "admin")
    try:
        await bus.wire.ensure_claim_store(admin, max_bytes=BOUND)
    finally:
        await admin.close()


async def _attack_as_producer(servers: NatsServers, layout: SecureLayout, out: Path) -> int:
    """Everything the producer's key tries while the collection runs; the store's bytes at
    its fullest."""
    admin = await _connect(servers, layout, "admin")
    producer = await _connect(servers, layout, "producer")
    runner_nc = await _connect(servers, layout, "runner")
    agent_nc = await _connect(servers, layout, AGENT_ROLE)
    js = producer.client.jetstream(timeout=0.3)
    stream = bus.subjects.CLAIMS_STREAM
    runner, me = _identity(layout, "runner"), _identity(layout, "producer")
    try:
        await _wait_for_a_claim(admin)  # the collection's bodies are in the store
        canary = os.urandom(9_000_000)  # a task body the runner addressed to the agent
        _, claim = await bus.wire.check_in(
            runner_nc, bus.subjects.tasks(WEATHER_AGENT), canary, None, ttl=600
        )
        await _refused(producer, js.purge_stream(stream), f"$JS.API.STREAM.PURGE.{stream}")
        await _refused(producer, js.delete_stream(stream), f"$JS.API.STREAM.DELETE.{stream}")
        await _refused(producer, js.update_stream(bus.wire.claim_store_config(max_bytes=-1)),
                       f"$JS.API.STREAM.UPDATE.{stream}")  # fmt: skip
        await _refused(
            producer, js.add_consumer(stream, deliver_subject="copy"), f"$JS.API.CONSUMER.CREATE.{stream}"
        )
        await _refused(producer, js.get_msg(stream, seq=1, direct=True), f"$JS.API.DIRECT.GET.{stream}")
        forged = f"gym.claims.{AGENT_ROLE}.{runner}.forged.0"  # a body as if the runner wrote it
        await _refused(producer, js.publish(forged, b"{}"), forged)
        theirs = f"gym.claims.{AGENT_ROLE}.{runner}.x.0"  # bodies addressed to an agent
        await _refused(
            producer, js.get_msg(stream, subject=theirs, direct=True), bus.subjects.claim_reads(theirs)
        )
        assert await bus.wire.check_out(agent_nc, b"", claim, release_it=True) == canary  # nothing wiped
        return await _overfill(producer, admin.js, me)
    finally:
        for nc in (agent_nc, runner_nc, producer, admin):
            await nc.close()


async def _wait_for_a_claim(admin: Connection) -> None:
    js = admin.js
    deadline = time.monotonic() + 60
    while (await js.stream_info(bus.subjects.CLAIMS_STREAM)).state.messages == 0:
        assert time.monotonic() < deadline, "no claimed body appeared"
        await asyncio.sleep(0.05)


async def _overfill(producer: Connection, admin: JetStreamContext, me: str) -> int:
    """Write its own 128 KiB chunks until the server refuses one: the bound holds, and
    GymBus's own client says the store is full. The store's bytes then. The chunks live
    long enough to pile up however slow the machine (short-lived ones could expire as fast
    as they are written), and go once refused, so the collection gets room again."""
    js = producer.client.jetstream(timeout=30)
    chunk = b"z" * (128 * 1024)
    stream = bus.subjects.CLAIMS_STREAM
    mine = f"gym.claims.{AGENT_ROLE}.{me}.fill"
    try:
        for index in range(BOUND // len(chunk) + 10):
            try:
                await js.publish(f"{mine}.{index}", chunk, msg_ttl=300)
            except nats.js.errors.APIError as exc:
                assert exc.err_code == 10077 and "maximum bytes" in (exc.description or ""), exc
                stored = (await admin.stream_info(stream)).state.bytes
                with pytest.raises(schemas.ClaimStoreFull, match="full"):
                    body = b"x" * (BOUND + 1)  # more than the bound, whatever the collection frees meanwhile
                    await bus.wire.check_in(producer, bus.subjects.tasks(WEATHER_AGENT), body, None, ttl=2)
                return stored
        raise AssertionError("the claim store took more than its bound")
    finally:
        await admin.purge_stream(stream, subject=f"{mine}.>")


async def test_an_environment_key_cannot_publish_into_the_runners_inbox_space(
    secured: tuple[NatsServers, SecureLayout],
) -> None:
    servers, layout = secured
    runner = await _connect(servers, layout, "runner")
    environment = await _connect(servers, layout, ENV_ROLE)
    heard: list[bytes] = []
    inbox = bus.security.inbox_prefix_for(bus.BusAuth(nkey=layout.credentials["runner"]))

    async def listen(msg: object) -> None:
        heard.append(getattr(msg, "data", b""))

    serving = await _connect(servers, layout, ENV_ROLE)
    try:
        await runner.client.subscribe(f"{inbox}.>", cb=listen)
        await runner.client.flush()
        for subject in (f"{inbox}.x.1", f"{runner.client.new_inbox()}.0", "_INBOX.anyone.1"):
            await _refused(environment, environment.client.publish(subject, b"forged reply"), subject)
        assert heard == []
        # What it may do: answer the runner's own request, keep-alives included, however long.
        host = bus.ServiceHost(serving)
        await host.add(_slow_verify(seconds=5))
        reply = await bus.request(runner, bus.subjects.env_verify(WEATHER), b"{}", timeout=30)
        await host.stop()
        await bus.connection.check_permitted(serving, None, ENV_ROLE)  # the keep-alives and the answer went
        assert reply == b"verified after 5 s"
    finally:
        for nc in (serving, environment, runner):
            await nc.close()


def _slow_verify(seconds: float) -> bus.ServiceSpec:
    async def verify(data: bytes, headers: object) -> bytes:
        await asyncio.sleep(seconds)  # two keep-alives, then the answer
        return f"verified after {seconds:g} s".encode()

    endpoint = bus.Endpoint("verify", bus.subjects.env_verify(WEATHER), verify)
    return bus.ServiceSpec(WEATHER, "environment", (endpoint,))


async def test_no_key_can_make_a_service_publish_where_it_chose(
    secured: tuple[NatsServers, SecureLayout],
) -> None:
    """An agent's key asks its environment to answer on JetStream's API (an empty keep-alive
    or error reply there deletes a stream with the service's rights): it is not served."""
    servers, layout = secured
    agent = await _connect(servers, layout, AGENT_ROLE)
    environment = await _connect(servers, layout, ENV_ROLE)
    admin = await _connect(servers, layout, "admin")
    host = bus.ServiceHost(environment)
    try:
        await bus.run.ensure_streams(admin)
        await host.add(_slow_verify(seconds=3))
        for reply in (f"$JS.API.STREAM.DELETE.{bus.subjects.TASKS_STREAM}", "gym.results.evil"):
            await agent.client.publish(bus.subjects.env_verify(WEATHER), b"{}", reply=reply)
            # nats.micro's own answers too:
            await agent.client.publish(f"$SRV.PING.{WEATHER}", b"", reply=reply)
        await agent.client.flush()
        await asyncio.sleep(4)  # past the first keep-alive and the answer
        await admin.client.jetstream(timeout=5).stream_info(bus.subjects.TASKS_STREAM)  # still there
        [stats] = host.stats()
        assert (stats.endpoints[0].num_requests, stats.endpoints[0].num_errors) == (2, 2)
    finally:
        await host.stop()
        for nc in (agent, environment, admin):
            await nc.close()
