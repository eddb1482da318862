"""`gym-runner secure init --operator`: GymBus's roles as JWT users of an operator-mode
nats-server (an operator, its accounts, a full resolver), each process with its role's
`.creds` file, collecting as on an nkey-locked bus.

The JWTs are signed by NATS's own JWT library (npm's `@nats-io/jwt`, run by node), which
`sh scripts/install-node.sh` installs. Without it the tests are skipped, except in CI
(`CI` set), where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import faults
from bench._cluster import WEATHER, WEATHER_AGENT, NatsServers, tally, wait_until
from gymbus import bus, schemas
from gymbus.runner.security import _operator
from gymbus.runner.security._secure import SecureLayout, secure_init

pytestmark = pytest.mark.timeout(180)

RUNNER = [sys.executable, "-m", "gymbus.runner"]


@pytest.fixture(scope="module")
def operator_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServers, SecureLayout]]:
    missing = _operator.jwt_tool_missing()
    if missing:
        message = f"{missing} (sh scripts/install-node.sh installs both)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; in CI a missing JWT library is a failure, not a skip")
        pytest.skip(message)
    work = tmp_path_factory.mktemp("operator")
    layout = secure_init(work / "secrets", [WEATHER], [], ["policy"], operator=True)
    config = layout.config.read_text()
    trust = config[config.index("operator:") :]  # the operator, its resolver and its accounts
    with NatsServers(work, size=1, extra=trust) as servers:
        yield servers, layout


def _env(url: str, creds: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    return {**clean, "NATS_URL": url, "NATS_CREDS": str(creds)}


def test_secure_init_writes_creds_files_and_keeps_the_seeds_out_of_the_config(
    operator_bus: tuple[NatsServers, SecureLayout],
) -> None:
    _, layout = operator_bus
    assert layout.helm_values is None
    assert {path.suffix for path in layout.credentials.values()} == {".creds"}
    secrets = layout.config.parent
    for path in [*layout.credentials.values(), *(secrets / "operator").glob("*.nk")]:
        assert path.stat().st_mode & 0o777 == 0o600, path
    seeds = [line for path in layout.credentials.values() for line in path.read_text().splitlines()
             if line.startswith("SU")]  # fmt: skip
    assert len(seeds) == len(layout.credentials)
    assert not [seed for seed in seeds if seed in layout.config.read_text()]
    # Each JWT rides in its client's CONNECT line, which the server bounds.
    jwts = [path.read_text().splitlines()[1] for path in layout.credentials.values()]
    assert f"max_control_line: {_operator.MAX_CONTROL_LINE}" in layout.config.read_text()
    assert max(map(len, jwts)) + 1024 < _operator.MAX_CONTROL_LINE


def test_a_collection_with_creds_users_of_an_operator_mode_server(
    operator_bus: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, layout = operator_bus
    url, creds = servers.url(0), layout.credentials
    workers = [
        subprocess.Popen([*RUNNER, "serve", name], env=_env(url, creds[role]),
                         stdout=(tmp_path / f"{role}.log").open("wb"), stderr=subprocess.STDOUT)
        for name, role in ((WEATHER, f"env-{WEATHER}"), (WEATHER_AGENT, f"agent-{WEATHER_AGENT}"),
                           ("offline", "model-policy"))
    ]  # fmt: skip
    try:
        for role in (f"env-{WEATHER}", f"agent-{WEATHER_AGENT}", "model-policy"):
            path = tmp_path / f"{role}.log"
            wait_until(lambda path=path: "ready:" in path.read_text(errors="replace"), 60, role)
        source, args, keys = faults.weather_tasks(tmp_path, 100)
        out = tmp_path / "out.jsonl"
        collect = subprocess.run([*RUNNER, "collect", "-i", str(source), "-o", str(out), *args],
                                 env=_env(url, creds["runner"]), capture_output=True, text=True, timeout=120)  # fmt: skip
        assert collect.returncode == 0, collect.stderr[-3000:]
        status = subprocess.run([*RUNNER, "status", "--json"], env=_env(url, creds["monitor"]),
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert status.returncode == 0 and WEATHER_AGENT in status.stdout, status.stderr
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
    result = tally(out, keys)
    assert (result.written, result.lost, result.duplicated, result.failed) == (100, 0, 0, 0)
    refused = [line for line in servers.log(0).splitlines() if "Violation" in line]
    assert not refused  # every role had what it needed, from its JWT alone
    assert len(list((layout.config.parent / "resolver").glob("*.jwt"))) == 2  # the preloaded accounts


async def test_the_jwts_lock_as_the_nkey_config_does(operator_bus: tuple[NatsServers, SecureLayout]) -> None:
    servers, layout = operator_bus
    url = servers.url(0)
    with pytest.raises(schemas.NotAuthorized, match="not authorized"):
        await bus.connect(url, name="intruder", auth=bus.BusAuth())
    producer = await bus.connect(url, name="producer", auth=bus.BusAuth(creds=layout.credentials["producer"]),
                                 role="producer")  # fmt: skip
    try:
        await producer.client.publish("gym.results.r0123456789abcdef", b'{"reward": 999.0}')
        with pytest.raises(TimeoutError):  # the JetStream API request is dropped by the server
            await producer.client.jetstream(timeout=1).purge_stream(bus.subjects.CLAIMS_STREAM)
        with pytest.raises(schemas.NotAuthorized, match=r"gym\.results"):
            await bus.connection.check_permitted(producer, None, "producer")
    finally:
        await producer.close()


def test_operator_mode_without_the_jwt_library_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_operator, "JWT_TOOL", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match=r"npm ci --prefix .*nowhere|node is not installed"):
        secure_init(tmp_path / "secrets", [WEATHER], [], ["policy"], operator=True)
    assert not (tmp_path / "secrets" / "credentials").exists()  # nothing half made to block a retry
    monkeypatch.setenv("PATH", str(tmp_path))  # no node at all
    with pytest.raises(RuntimeError, match="node is not installed"):
        secure_init(tmp_path / "secrets", [WEATHER], [], ["policy"], operator=True)


async def test_a_role_answers_a_long_call_with_keep_alives_as_its_jwt_allows(
    operator_bus: tuple[NatsServers, SecureLayout],
) -> None:
    """The user JWT's `resp` (any number of answers, for the role's longest call): two
    keep-alives, then the answer, reach the runner."""
    servers, layout = operator_bus
    creds = layout.credentials
    runner = await bus.connect(servers.url(0), name="runner", auth=bus.BusAuth(creds=creds["runner"]))
    serving = await bus.connect(servers.url(0), name="env", auth=bus.BusAuth(creds=creds[f"env-{WEATHER}"]))
    host = bus.ServiceHost(serving)

    async def verify(data: bytes, headers: object) -> bytes:
        await asyncio.sleep(5)
        return b"verified"

    try:
        await host.add(
            bus.ServiceSpec(
                WEATHER, "environment", (bus.Endpoint("verify", bus.subjects.env_verify(WEATHER), verify),)
            )
        )
        assert await bus.request(runner, bus.subjects.env_verify(WEATHER), b"{}", timeout=30) == b"verified"
        await bus.connection.check_permitted(serving, None, f"env-{WEATHER}")
    finally:
        await host.stop()
        await serving.close()
        await runner.close()
