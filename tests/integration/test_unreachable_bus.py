"""A NATS_URL nothing NATS answers at says what it is: a port nothing listens on, a host
name that does not resolve, or a server that is not NATS (an HTTP port)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gymbus import bus, schemas
from tests.fake_openai import free_port
from tests.integration.test_collect import run_cli

QUICK = schemas.Timeouts(connect=1.0)


@pytest.fixture
def http_port() -> Iterator[int]:
    """An HTTP server's port: it accepts a connection and waits for a request, saying nothing."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def _refusal(url: str) -> str:
    with pytest.raises(schemas.BusUnavailable) as failure:
        async with bus.open_bus(url, name="t", timeouts=QUICK):
            pass
    return str(failure.value)


async def test_a_port_nothing_listens_on_is_said_to_refuse() -> None:
    port = free_port()
    said = await _refusal(f"nats://127.0.0.1:{port}")
    assert f"nothing listens on 127.0.0.1:{port} (connection refused)" in said


async def test_a_host_name_that_does_not_resolve_is_said_so() -> None:
    said = await _refusal("nats://no-such-host.invalid:4222")
    assert "no host is named no-such-host.invalid (the name does not resolve)" in said


async def test_an_http_port_is_said_to_be_no_nats_server(http_port: int) -> None:
    said = await _refusal(f"nats://127.0.0.1:{http_port}")
    assert f"127.0.0.1:{http_port} is not a NATS server: a NATS server greets with INFO at once" in said


def test_status_says_why_at_the_command_line() -> None:
    port = free_port()
    done = run_cli("status", env={"NATS_URL": f"nats://127.0.0.1:{port}"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        f"error: cannot reach NATS at nats://127.0.0.1:{port} within 5 s: nothing listens on" in done.stderr
    )
