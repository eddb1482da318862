"""Why a NATS URL cannot be reached, said as what it is: a name that does not resolve, a
port nothing listens on, or a server that is not NATS (a NATS server greets every client
with `INFO` at once; an HTTP server waits for a request and says nothing).

nats-py keeps trying a URL until its connect timeout whatever went wrong, so all it can
say is that the time ran out. `why_unreachable` looks for itself, alongside the attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import urlsplit

__all__ = ["why_unreachable"]

_NATS_PORT = 4222
_GREETING = b"INFO"


async def why_unreachable(urls: list[str], greeting_wait: float) -> str | None:
    """What is wrong with each of `urls` that is no NATS server ("; "-joined), or `None`
    if they all greet as NATS servers do (then the cause lies elsewhere: TLS, say).
    `greeting_wait`: seconds a server that accepted the connection may take to greet."""
    found = await asyncio.gather(*(_why(url, greeting_wait) for url in urls))
    reasons = [reason for reason in found if reason]
    return "; ".join(reasons) if reasons else None


async def _why(url: str, greeting_wait: float) -> str | None:
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host, port = parts.hostname or "localhost", parts.port or _NATS_PORT
    try:
        await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return f"no host is named {host} (the name does not resolve)"
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return f"nothing listens on {host}:{port} (connection refused): is nats-server running, on that port?"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or type(exc).__name__}"
    try:
        greeting = await asyncio.wait_for(reader.read(len(_GREETING)), greeting_wait)
    except (TimeoutError, OSError):
        greeting = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if greeting.startswith(_GREETING):
        return None
    said = f"it sent {greeting!r}" if greeting else f"it said nothing in {greeting_wait:g} s"
    return (
        f"{host}:{port} is not a NATS server: a NATS server greets with INFO at once, and {said} "
        f"(an HTTP port, say; nats-server's client port is {_NATS_PORT} unless its config says otherwise)"
    )
