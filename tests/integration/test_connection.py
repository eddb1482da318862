"""Connecting: NATS_URL if set (unreachable is an error, not a fallback), else an embedded server."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from gymbus import bus, schemas
from gymbus.bus.connection import find_server_binary
from tests.fake_openai import free_port
from tests.integration.test_collect import run_cli


async def test_an_unreachable_nats_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"nats://user:hunter2@127.0.0.1:{free_port()}"
    monkeypatch.setenv("NATS_URL", url)
    started = time.monotonic()
    with pytest.raises(schemas.BusUnavailable) as failure:
        async with bus.open_bus(name="t", timeouts=schemas.Timeouts(connect=1.0)):
            pass
    assert time.monotonic() - started < 5
    assert "cannot reach NATS" in str(failure.value)
    assert "hunter2" not in str(failure.value)


async def test_without_nats_url_an_embedded_server_runs_and_stops(no_nats_url: None) -> None:
    async with bus.open_bus(name="t") as opened:
        assert opened.embedded is not None
        assert opened.conn.client.max_payload == 8 * 1024 * 1024
        await opened.conn.js.account_info()  # JetStream is on
        url = opened.url
    with pytest.raises(schemas.BusUnavailable):
        await bus.connect(url, name="after", timeouts=schemas.Timeouts(connect=1.0))


def test_embedded_server_can_restart_on_its_port_with_its_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = bus.EmbeddedServer(store_dir=tmp_path)
    first.start()
    port = first.port
    first.stop()
    again = bus.EmbeddedServer(port=port, store_dir=tmp_path)
    assert again.start() == f"nats://127.0.0.1:{port}"
    again.stop()


def test_a_server_without_jetstream_is_named_in_one_line_with_the_fix() -> None:
    port = free_port()
    server = subprocess.Popen(
        [find_server_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"nats://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        done = run_cli("status", env={"NATS_URL": url}, timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: NATS at {url} has no JetStream, where GymBus keeps its task queues, sessions and results: "
        "start nats-server with -js (`nats-server -js`), or `jetstream {}` in its config"
    )


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
