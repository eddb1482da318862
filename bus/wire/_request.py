"""Requests with explicit timeouts, that notice a responder that died mid-request.

nats-py's `request()` waits out its whole timeout when the worker serving a request
dies, or when a server restart loses the request or its reply; for a model call that
is minutes. So a service host sends a keep-alive (an empty message with the header
`Gym-Working`) to the reply subject every `Timeouts.keepalive` seconds while a request
runs, and a requester that hears nothing for `Timeouts.silence` seconds gives up with
`WorkerSilent`, a `RequestTimeout` (transient: the caller may try again; whether the work
was done is unknown). The limit is a measure of the signal, not of the work: a call may run
for as long as its timeout while its keep-alives come. It grows with the gaps measured
between a call's keep-alives (a worker on a busy machine sends them late), up to
`Timeouts.silence_most`, and time this process itself could not listen (its own loop held)
is not counted as the worker's silence. One wildcard inbox subscription
per connection carries every reply and keep-alive; its silence watcher ends when the
connection closes, failing what still waits with `BusUnavailable`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass

import nats.errors
from nats.aio.msg import Msg

from gymbus.schemas import (
    DEFAULT_TIMEOUTS,
    WORKING,
    BusUnavailable,
    GymError,
    NoResponders,
    PayloadTooLarge,
    RequestTimeout,
)

from ..cluster import Connection
from ._claim_checks import check_in, check_out, needs_claim, release_claim
from ._codec import error_from_reply

__all__ = ["WorkerSilent", "request"]

_STATUS = "Status"
WATCH_TASK = "gymbus-request-watch"  # the silence watcher's task name starts with this
_NO_RESPONDERS = "503"


class WorkerSilent(RequestTimeout):
    """No reply and no keep-alive for the silence limit: the worker died or froze mid-request,
    or a server restart lost the request or its reply. The work may or may not have been done."""


@dataclass
class _Waiting:
    reply: asyncio.Future[Msg]
    heard: float
    silence: float

    def beat(self, now: float) -> None:
        """A keep-alive came: the silence allowed grows to `_GAPS` times the longest gap so far."""
        gap = now - self.heard
        self.heard = now
        self.silence = max(self.silence, min(DEFAULT_TIMEOUTS.silence_most, _GAPS * gap))


_GAPS = 2.5
"""A worker is silent after this many of its longest gap between keep-alives (and `silence`)."""


class _Requester:
    """The replies of one connection, matched to their requests by inbox token."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.prefix = ""
        self.waiting: dict[str, _Waiting] = {}
        self.tokens = (str(n) for n in itertools.count())
        self.ready: asyncio.Task[None] | None = None
        self.watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.prefix:
            return
        if self.ready is None:
            self.ready = asyncio.ensure_future(self._subscribe())
        await self.ready

    async def _subscribe(self) -> None:
        prefix = self.conn.client.new_inbox() + "."
        try:
            await self.conn.client.subscribe(prefix + "*", cb=self._on_reply)
        except nats.errors.Error:
            self._forget()  # a closed connection: the next request on it fails afresh
            raise
        self.prefix = prefix
        self.watch = asyncio.create_task(self._watch_silence(), name=f"{WATCH_TASK} {prefix}")

    async def _on_reply(self, msg: Msg) -> None:
        waiting = self.waiting.get(msg.subject[len(self.prefix) :])
        if waiting is None or waiting.reply.done():
            return
        headers = msg.headers
        if headers and WORKING in headers:
            waiting.beat(time.monotonic())
            return
        waiting.heard = time.monotonic()
        if headers and headers.get(_STATUS) == _NO_RESPONDERS and not msg.data:
            waiting.reply.set_exception(NoResponders("nobody serves it"))
        else:
            waiting.reply.set_result(msg)

    async def _watch_silence(self) -> None:
        # Ends with its connection: a watcher left running would keep waking, and keep
        # the closed client (and this requester) alive for good.
        check = DEFAULT_TIMEOUTS.silence_check
        last = time.monotonic()
        while not self.conn.is_closed:
            await asyncio.sleep(check)
            now = time.monotonic()
            held, last = now - last - check, now
            if held > check:
                # This process's loop was held (its own work, a busy machine): what came
                # meanwhile is still unread, and the time it could not listen is not the
                # workers' silence. Look again once the loop has read it.
                for waiting in self.waiting.values():
                    waiting.heard += held
                continue
            for waiting in list(self.waiting.values()):
                if now - waiting.heard > waiting.silence and not waiting.reply.done():
                    waiting.reply.set_exception(
                        WorkerSilent(
                            f"no reply and no sign of work for {waiting.silence:g} s (its worker died?)"
                        )
                    )
        for waiting in list(self.waiting.values()):
            if not waiting.reply.done():
                waiting.reply.set_exception(BusUnavailable("connection closed while waiting for a reply"))
        self._forget()

    def _forget(self) -> None:
        """Leave the connection: its next request (on a connection closed meanwhile) fails afresh."""
        if self.conn.requester is self:
            self.conn.requester = None

    async def ask(
        self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float, silence: float
    ) -> Msg:
        token = next(self.tokens)
        loop = asyncio.get_running_loop()
        waiting = _Waiting(loop.create_future(), time.monotonic(), silence)
        self.waiting[token] = waiting
        timer = loop.call_later(timeout, _expire, waiting.reply, timeout)
        try:
            await self.conn.client.publish(subject, data, reply=self.prefix + token, headers=headers)
            return await waiting.reply
        finally:
            timer.cancel()
            del self.waiting[token]


def _expire(reply: asyncio.Future[Msg], timeout: float) -> None:
    if not reply.done():
        reply.set_exception(RequestTimeout(f"no reply within {timeout:g} s"))


def _requester(conn: Connection) -> _Requester:
    """The connection's requester, made on its first request."""
    if not isinstance(conn.requester, _Requester):
        conn.requester = _Requester(conn)
    return conn.requester


async def request(
    conn: Connection,
    subject: str,
    data: bytes,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    silence: float = DEFAULT_TIMEOUTS.silence,
) -> bytes:
    """Send `data` to `subject` and return the reply body.

    Raises `NoResponders` at once when nobody serves the subject, `RequestTimeout` after
    `timeout` seconds, `WorkerSilent` (a `RequestTimeout`) after `silence` seconds without a
    reply or keep-alive,
    `BusUnavailable` when the connection is (or gets) closed, and the matching
    `RemoteError` when the function replied with an error. A body too big for one message
    (either way) goes by claim check (`ClaimStoreFull` if the store has no room), kept for
    `timeout` plus `Timeouts.late_reply` seconds unless read first.
    """
    sent_headers = dict(headers) if headers else None
    requester = _requester(conn)
    try:
        if needs_claim(conn, data):
            ttl = timeout + DEFAULT_TIMEOUTS.late_reply
            data, sent_headers = await check_in(conn, subject, data, sent_headers, ttl=ttl)
        await requester.start()
        msg = await requester.ask(subject, data, sent_headers, timeout, silence)
    except NoResponders:
        await release_claim(conn, sent_headers)  # nobody will read it
        raise NoResponders(f"nobody serves {subject}", subject=subject) from None
    except GymError as exc:
        exc.subject = subject
        raise
    except nats.errors.MaxPayloadError:
        raise PayloadTooLarge(f"{len(data)} bytes exceed the server's max payload", subject=subject) from None
    except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError) as exc:
        raise BusUnavailable(f"connection closed ({type(exc).__name__})", subject=subject) from None
    error = error_from_reply(msg.headers, msg.data, subject)
    if error is not None:
        raise error
    return await check_out(conn, msg.data, msg.headers, release_it=True)
