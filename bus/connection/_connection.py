"""Connecting to NATS: `NATS_URL` if set (unreachable is an error, never a silent
fallback), otherwise an embedded server started for the caller, locked with credentials
made for that run.

`NATS_URL` may name several servers of a cluster, comma-separated; the client picks one
and moves to another when it is lost. Credentials come from `BusAuth.from_env()`. A
server that refuses them is `NotAuthorized` at once (not a timeout), naming the server
and the role the process needs; a subject the role may not use is recorded when the
server says so, and `check_permitted` turns that into `NotAuthorized` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import nats
import nats.js.errors
from nats.aio.client import Client

from gymbus.schemas import DEFAULT_TIMEOUTS, BusError, BusUnavailable, NotAuthorized, Timeouts, redact_url

from ..cluster import Connection, replicas_from_env
from ..security import BusAuth
from ..wire import request
from ._discovery import (
    QueueDepth,
    ServiceInfo,
    ServiceStats,
    model_servers,
    served_agents,
    served_within,
    service_infos,
    service_stats,
    task_queues,
    unserved,
    wait_served,
)
from ._embedded import EmbeddedServer
from ._reach import why_unreachable

__all__ = [
    "Bus",
    "Connection",
    "check_permitted",
    "connect",
    "connect_bus",
    "lost_for_good",
    "nats_url_from_env",
    "open_bus",
    "split_urls",
]

log = logging.getLogger("gymbus.bus")


def nats_url_from_env() -> str | None:
    """The `NATS_URL` environment variable, or `None` when unset or empty."""
    return os.environ.get("NATS_URL") or None


def split_urls(url: str) -> list[str]:
    """The servers of a comma-separated `NATS_URL`."""
    return [one.strip() for one in url.split(",") if one.strip()]


_PERMISSIONS = "permissions violation"
_REFUSED = ("authorization violation", "authentication", "user authentication expired")


async def check_permitted(
    conn: Connection,
    wanted: list[str] | None,
    role: str,
    timeout: float = DEFAULT_TIMEOUTS.connect,
    auth: BusAuth | None = None,
) -> None:
    """`NotAuthorized` naming the subjects of `wanted` (`None`: any) the server refused
    this connection (made with `auth`, if given: the message says which credentials). nats-server
    reports a permissions violation asynchronously, never as a reply, so this first waits until
    the server has handled everything sent so far."""
    await _handled(conn, timeout)
    denied = [subject for subject in _refused_subjects(conn) if wanted is None or subject in wanted]
    if denied:
        raise NotAuthorized(_denied_message(denied, role, auth))


def _refused_subjects(conn: Connection) -> list[str]:
    return [message.split('"')[1] for message in conn.refusals if message.count('"') >= 2]


_ROLE_FILE = re.compile(r"^(runner|producer|monitor|admin|adapters|(agent|env|model|nemo-gym)-.+)$")
"""The name `secure init` gives a role's credentials file (`credentials/<role>.nk`)."""


def _denied_message(denied: list[str], role: str, auth: BusAuth | None) -> str:
    """The server refused `denied` to these credentials: which they are (by their file's
    name, whose role they are) and the role this process needs (its file, if beside them)."""
    subjects = ", ".join(dict.fromkeys(denied))
    needed = f"this process needs the credentials of the {role} role"
    key = auth.nkey or auth.creds if auth is not None else None
    if auth is None or key is None:
        return f"the server does not let these credentials use {subjects}: {needed}"
    named = _ROLE_FILE.match(key.stem)
    used = auth.describe() + (f", the {named.group(1)} role's" if named else "")
    beside = key.with_stem(role)
    if beside.exists():
        needed += f" ({'NATS_NKEY' if auth.nkey else 'NATS_CREDS'}={beside})"
    return f"the server does not let these credentials ({used}) use {subjects}: {needed}"


async def _handled(conn: Connection, timeout: float) -> None:
    """Return once the server has handled what this connection sent before, and any error
    it caused has reached the error callback. A message to our own inbox travels behind
    those and comes back after their errors; `flush()` is not enough, because nats-py
    writes its PING ahead of publishes still in its buffer."""
    inbox = conn.client.new_inbox()
    echo = await conn.client.subscribe(inbox, max_msgs=1)
    try:
        await conn.client.publish(inbox, b"")
        await echo.next_msg(timeout=timeout)
    except (TimeoutError, nats.errors.Error):
        pass  # no answer to wait for: what was refused so far is all we can report
    finally:
        with contextlib.suppress(nats.errors.Error):
            await echo.unsubscribe()


def _refusal_message(url: str, auth: BusAuth, role: str) -> str:
    return (
        f"not authorized: NATS at {redact_url(url)} refused {auth.describe()}; this process needs "
        f"the credentials of the {role} role (NATS_NKEY, NATS_CREDS, NATS_USER and NATS_PASSWORD, "
        "or NATS_TOKEN; `gym-runner secure init` writes them)"
    )


async def lost_for_good(conn: Connection, window: float = DEFAULT_TIMEOUTS.reconnect_window) -> None:
    """Return once `conn` has been without a server for `window` seconds on end: what a
    stopping process still waits for cannot come (a restarted server is back sooner).
    Never returns while the connection stays up."""
    while conn.lost_for() < window:
        await asyncio.sleep(DEFAULT_TIMEOUTS.silence_check)


async def connect(
    url: str,
    *,
    name: str,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    auth: BusAuth | None = None,
    role: str = "client",
    replicas: int | None = None,
) -> Connection:
    """A connection to `url` (one server, or several comma-separated) that reconnects
    forever once established, with `auth` (default: from the environment).

    The first connection must succeed within `timeouts.connect` seconds, otherwise
    `BusUnavailable` names the (redacted) URL; a server that refuses the credentials is
    `NotAuthorized` at once, naming the `role` this process needs. `replicas` (default
    `GYMBUS_REPLICAS`) is how many copies of a stream or bucket it creates.
    """
    auth = _usable(auth)
    urls = split_urls(url)
    conn = Connection(Client(), timeout=timeouts.connect)
    watch = _Watch(conn)
    connecting = asyncio.ensure_future(
        conn.client.connect(urls, **_options(name, timeouts, auth, urls, watch))
    )
    refusal = asyncio.ensure_future(watch.refused.wait())
    probing = asyncio.ensure_future(why_unreachable(urls, timeouts.connect))  # said only if needed
    try:
        await asyncio.wait({connecting, refusal}, timeout=timeouts.connect, return_when=FIRST_COMPLETED)
        if connecting.done() and connecting.exception() is None and not watch.refused.is_set():
            await _require_jetstream(conn, url)
            conn.replicas = replicas_from_env() if replicas is None else replicas
            return conn
        connecting.cancel()
        failure = None if not connecting.done() or connecting.cancelled() else connecting.exception()
        await conn.close()
        if watch.refused.is_set():
            raise NotAuthorized(_refusal_message(url, auth, role))
        raise BusUnavailable(_unreachable_message(url, timeouts, failure, await _probed(probing, timeouts)))
    finally:
        refusal.cancel()
        probing.cancel()


def _usable(auth: BusAuth | None) -> BusAuth:
    """`auth` (default: from the environment), or `NotAuthorized` saying why it cannot be used."""
    auth = BusAuth.from_env() if auth is None else auth
    try:
        auth.check()
    except ValueError as exc:
        raise NotAuthorized(f"cannot use the NATS credentials: {exc}") from None
    return auth


class _Watch:
    """nats-py's callbacks for one connection: refused credentials end the first attempt
    (`refused`), a refused subject is recorded on the connection, and losing and finding
    the server is timed there."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.refused = asyncio.Event()

    async def on_error(self, exc: Exception) -> None:
        text = str(exc).lower()
        if isinstance(exc, nats.errors.AuthorizationError) or any(word in text for word in _REFUSED):
            self.refused.set()
        elif _PERMISSIONS in text:
            self.conn.refused(str(exc))
            log.warning("the server refused this process's role: %s", str(exc).removeprefix("nats: "))
        else:
            log.debug("nats: %s: %s", type(exc).__name__, exc)

    async def disconnected(self) -> None:
        if not self.conn.is_closed:  # closing on purpose is no news
            self.conn.lost()
            log.warning("lost the connection to NATS; reconnecting")

    async def reconnected(self) -> None:
        self.conn.found()
        log.warning("reconnected to NATS")


def _options(name: str, timeouts: Timeouts, auth: BusAuth, urls: list[str], watch: _Watch) -> dict[str, Any]:
    """nats-py's `connect` options: reconnect forever once connected, report through `watch`."""
    return dict(
        name=name,
        connect_timeout=max(1, int(timeouts.connect)),
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,  # nats-py accepts float seconds
        error_cb=watch.on_error,
        disconnected_cb=watch.disconnected,
        reconnected_cb=watch.reconnected,
        drain_timeout=max(1, int(timeouts.drain)),
        **auth.connect_options(urls),
    )


async def _probed(probing: asyncio.Future[str | None], timeouts: Timeouts) -> str | None:
    """What `why_unreachable` found, given `timeouts.ping` more to finish; `None` if nothing."""
    try:
        return await asyncio.wait_for(asyncio.shield(probing), timeouts.ping)
    except (TimeoutError, OSError, ValueError):  # ValueError: a URL whose port is no number
        return None


def _unreachable_message(url: str, timeouts: Timeouts, failure: BaseException | None, why: str | None) -> str:
    where = f"cannot reach NATS at {redact_url(url)} within {timeouts.connect:.0f} s"
    if why:
        return f"{where}: {why}"
    return f"{where} ({type(failure).__name__ if failure is not None else 'TimeoutError'})"


async def _require_jetstream(conn: Connection, url: str) -> None:
    """`BusUnavailable`, in one line with the fix, when the server has no JetStream (started
    without `-js`): the task queue, sessions and results all live in it. The server's INFO
    says so; only then is JetStream asked, since a server of a cluster may reach it
    through another. Any other answer (a timeout, a refused role) is left to the calls
    that need JetStream."""
    if conn.server_info().get("jetstream"):
        return
    try:
        await conn.js.account_info()
    except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
        await conn.close()
        raise BusUnavailable(
            f"NATS at {redact_url(url)} has no JetStream, where GymBus keeps its task queues, sessions and "
            "results: start nats-server with -js (`nats-server -js`), or `jetstream {}` in its config"
        ) from None
    except (nats.errors.Error, TimeoutError):
        pass


@dataclass
class Bus:
    """A live connection (`conn`) and the embedded server if this process started one (then
    `url` is the embedded server's). What a runner needs of the connection is a method here
    (or takes the `Bus`): the runner holds no NATS objects."""

    conn: Connection
    url: str
    embedded: EmbeddedServer | None

    @classmethod
    def over(cls, conn: Connection, url: str = "") -> Bus:
        """A `Bus` over a connection made with `connect`, which its maker closes."""
        return cls(conn=conn, url=url, embedded=None)

    async def close(self, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        """Drain the connection (up to `timeouts.drain`), or close it if the server is gone."""
        await _close(self.conn, timeouts)

    def worker_auth(self) -> BusAuth:
        """The credentials of worker processes this process starts on its embedded
        server (none: on a shared bus workers bring their own)."""
        return self.embedded.credentials("worker") if self.embedded is not None else BusAuth()

    async def served(
        self, services: list[str], timeout: float = 0.0, check: Callable[[], None] | None = None
    ) -> set[str]:
        """Which of `services` some live worker serves, waiting up to `timeout` seconds for
        those none does yet (`served_within`)."""
        return await served_within(self.conn, services, timeout, check)

    async def wait_served(
        self, services: list[str], timeout: float, check: Callable[[], None] | None = None
    ) -> None:
        """Until every one of `services` is served; `BusUnavailable` after `timeout` (`wait_served`)."""
        await wait_served(self.conn, services, timeout, check)

    async def request(
        self, subject: str, body: bytes, timeout: float, headers: Mapping[str, str] | None = None
    ) -> bytes:
        """The reply to `body` on `subject` (`bus.request`: its errors are `GymError`s)."""
        return await request(self.conn, subject, body, timeout=timeout, headers=headers)

    async def service_infos(
        self, name: str | None = None, window: float = DEFAULT_TIMEOUTS.discovery
    ) -> list[ServiceInfo]:
        """The live services (named `name`, or all), as they answer within `window` seconds."""
        return await service_infos(self.conn, name, window)

    async def service_stats(self, window: float = DEFAULT_TIMEOUTS.discovery) -> list[ServiceStats]:
        """Every live service's stats, as they answer within `window` seconds."""
        return await service_stats(self.conn, window=window)

    async def task_queues(self) -> list[QueueDepth]:
        """Every agent's task queue (`task_queues`)."""
        return await task_queues(self.conn)

    async def served_agents(self, window: float = DEFAULT_TIMEOUTS.discovery) -> dict[str, str]:
        """The live agents, each with the environment its service names (`served_agents`)."""
        return await served_agents(self.conn, window)

    async def model_servers(
        self, agents: set[str], window: float = DEFAULT_TIMEOUTS.discovery
    ) -> dict[str, set[str]]:
        """The inference servers of the models `agents` call (`model_servers`)."""
        return await model_servers(self.conn, agents, window)

    async def unserved(self, agents: set[str], window: float = DEFAULT_TIMEOUTS.discovery) -> dict[str, str]:
        """Why each of `agents` cannot run now, if it cannot (`unserved`)."""
        return await unserved(self.conn, agents, window)


_RUNNER_ROLES = ("runner", "monitor", "producer")


async def connect_bus(
    url: str,
    *,
    name: str,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    auth: BusAuth | None = None,
    role: str = "runner",
) -> Bus:
    """A `Bus` connected to `url` (see `connect`) for a holder that outlives one block
    (a trainer); `Bus.close` ends it. `open_bus` is the same for a block."""
    return Bus.over(await connect(url, name=name, timeouts=timeouts, auth=auth, role=role), url)


@asynccontextmanager
async def open_bus(
    url: str | None = None,
    *,
    name: str,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    auth: BusAuth | None = None,
    role: str = "runner",
) -> AsyncIterator[Bus]:
    """Connect to `url` (default `NATS_URL`) with `auth` (default: from the environment);
    with no URL, start a locked embedded server and connect as its `runner` (or, for a
    worker `role`, its `worker`). `role` names the credentials this process needs, for
    the error when the server refuses them.

    On exit the connection is drained and an embedded server is stopped.
    """
    url = url or nats_url_from_env()
    embedded = None
    if url is None:
        embedded = EmbeddedServer(locked=True)
        url = embedded.start(timeouts.connect)
        auth = embedded.credentials("runner" if role in _RUNNER_ROLES else "worker")
        log.info("started embedded nats-server at %s", url)
    auth = BusAuth.from_env() if auth is None else auth
    try:
        conn = await connect(url, name=name, timeouts=timeouts, auth=auth, role=role)
        try:
            yield Bus(conn=conn, url=url, embedded=embedded)
        except (TimeoutError, nats.errors.Error, BusError) as exc:
            # A subject the role may not use is refused asynchronously, and what waited on
            # it only times out: say the cause, not the timeout.
            denied = _refused_subjects(conn)
            if denied and not isinstance(exc, NotAuthorized):
                raise NotAuthorized(_denied_message(denied, role, auth)) from exc
            raise
        finally:
            await _close(conn, timeouts)
    finally:
        if embedded is not None:
            embedded.stop()


async def _close(conn: Connection, timeouts: Timeouts) -> None:
    if conn.is_closed:
        return
    if conn.lost_for() > 0:  # nothing to drain through: the server is gone
        with contextlib.suppress(nats.errors.Error, OSError):
            await conn.close()
        return
    # A server that is gone breaks the drain with a socket error: never let it hide the
    # error that ended the work.
    try:
        await asyncio.wait_for(conn.client.drain(), timeouts.drain)
    except (TimeoutError, nats.errors.Error, OSError):
        with contextlib.suppress(nats.errors.Error, OSError):
            await conn.close()
