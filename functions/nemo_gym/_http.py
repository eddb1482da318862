"""HTTP to one NeMo Gym server on loopback: a POST with the rollout's session cookie, and
the server's answer, or a GymBus error that says what went wrong.

aiohttp, not httpx: its per-call CPU is a fraction of httpx's async client's, and every
tool call of a hosted server pays it. Cookies are threaded by hand (no cookie jar), as
NeMo Gym's own client does: the session cookie belongs to a rollout, not to the client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    BadRequest,
    DeadlineExceeded,
    FunctionFailed,
    NotFound,
    UpstreamFailed,
)

__all__ = ["Reply", "ServerClient", "ServerGone", "unprocessable"]

_MESSAGE_CHARS = 600
"""How much of a server's error text a GymBus error carries."""


class ServerGone(Exception):
    """The server did not answer at all (refused or dropped the connection)."""


@dataclass(frozen=True)
class Reply:
    body: bytes
    cookie: str | None
    """The session cookie the server set, if it set one."""


class ServerClient:
    """POSTs to the server at `port`; `name` names it in errors, `cookie` is its session
    cookie's name (NeMo Gym's `<ServerClass>___<instance name>`)."""

    def __init__(self, name: str, port: int, cookie: str) -> None:
        self.name = name
        self.base = f"http://127.0.0.1:{port}"
        self.cookie = cookie
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=DEFAULT_LIMITS.max_in_flight, keepalive_timeout=DEFAULT_TIMEOUTS.http_keepalive
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def post(
        self, path: str, body: bytes, cookie: str | None, timeout: float, deadline: float | None
    ) -> Reply:
        """The server's reply to `body` on `path`; a GymBus error for any other answer;
        `ServerGone` if the server cannot be reached."""
        headers = {"Content-Type": "application/json"}
        if cookie is not None:
            headers["Cookie"] = f"{self.cookie}={cookie}"
        left = timeout if deadline is None else min(timeout, max(0.001, deadline - time.time()))
        try:
            async with self.http.post(
                self.base + path, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=left)
            ) as response:
                data = await response.read()
                morsel = response.cookies.get(self.cookie)
                status = response.status
        except (aiohttp.ClientConnectionError, ConnectionError) as exc:
            if isinstance(exc, aiohttp.ServerTimeoutError):
                raise self._timed_out(path, left, deadline) from None
            raise ServerGone(f"{type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise self._timed_out(path, left, deadline) from None
        if status >= 300:
            raise self._error(path, status, data)
        return Reply(data, morsel.value if morsel is not None else None)

    def _timed_out(self, path: str, seconds: float, deadline: float | None) -> Exception:
        if deadline is not None and time.time() >= deadline:
            return DeadlineExceeded(
                f"the rollout's deadline passed while NeMo Gym server {self.name} ran {path}"
            )
        return UpstreamFailed(f"NeMo Gym server {self.name} did not answer {path} within {seconds:.0f} s")

    def _error(self, path: str, status: int, data: bytes) -> Exception:
        text = _text(data)
        where = f"NeMo Gym server {self.name}"
        if status == 422:
            return BadRequest(f"{where} refused the request to {path} (422): {unprocessable(data)}")
        if status == 404:
            return NotFound(f"{where} has no route {path}" + (f": {text}" if text else ""))
        if status < 500:
            return BadRequest(f"{where} refused the request to {path} ({status}): {text}")
        return FunctionFailed(f"{where} failed on {path} ({status}): {text}")

    async def close(self) -> None:
        await self.http.close()


class _Problem(msgspec.Struct):
    loc: list[str | int] = []
    msg: str = ""
    type: str = ""


class _Unprocessable(msgspec.Struct):
    detail: list[_Problem]


def unprocessable(data: bytes) -> str:
    """A FastAPI 422 body as a sentence naming each field: `field `a.b`: msg; ...`."""
    try:
        problems = msgspec.json.decode(data, type=_Unprocessable).detail
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _text(data)
    parts = []
    for problem in problems[:5]:
        where = ".".join(str(part) for part in problem.loc if part != "body")
        parts.append(f"field `{where or '(body)'}`: {problem.msg}")
    more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    return "; ".join(parts) + more


def _text(data: bytes) -> str:
    """A server's error body as one short line (FastAPI's `detail`, or NeMo Gym's JSON string)."""
    try:
        value: Any = msgspec.json.decode(data)
    except msgspec.DecodeError:
        value = data.decode(errors="replace")
    if isinstance(value, dict) and "detail" in value:
        value = value["detail"]
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + " ..."
