"""The service host: serves plain async handlers on subjects, in queue groups, as NATS services.

Each message gets its own task (bounded per endpoint), because nats-py runs a
subscription's callbacks one at a time: awaiting the work inside the callback would
serve one request at a time. Every function is registered with the NATS Services API
(`$SRV.PING/INFO/STATS`), so `gym-runner status` and `nats micro ls` list it with its
request and error counts and latency. The control plane is `nats.micro`'s; the
endpoints are ours, because `nats.micro` runs handlers serially and replies to an
unexpected exception with its `repr`.

Errors are values: a `GymError` raised by a handler becomes an error reply of its code;
any other exception becomes `FunctionFailed` with the exception's type only, and its
traceback goes to this process's log. A request nested deeper than `Limits.max_depth`
is a `BadRequest` before any handler decodes it.

Answers go only to inboxes (`_INBOX.<...>`). nats-server lets a serving role answer any
request it received (`allow_responses`) on whatever reply subject the requester chose; a
request whose reply subject is anything else is refused unanswered, so no requester can
make a service publish for it (an empty keep-alive on `$JS.API.STREAM.DELETE.<stream>`
would delete the stream with the service's rights).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import MaxPayloadError
from nats.micro.service import (
    EndpointInfo,
    EndpointStats,
    Service,
    ServiceConfig,
    ServiceInfo,
    ServiceStats,
)

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    WORKING,
    BadRequest,
    DeadlineExceeded,
    FunctionFailed,
    GymError,
    PayloadTooLarge,
    Timeouts,
    deadline_passed,
)

from ..cluster import Connection
from ..wire import check_in, check_out, encode_error_reply, needs_claim, nested_deeper, subjects
from ._slots import Slots

__all__ = ["Endpoint", "EndpointCounts", "Handler", "Reporting", "ServiceHost", "ServiceSpec"]

log = logging.getLogger("gymbus.worker")

Handler = Callable[[bytes, Mapping[str, str]], Awaitable[bytes]]
"""A request handler: body and headers in, reply body out; raises `GymError` to fail."""

VERSION = "0.1.0"


@dataclass(frozen=True)
class Endpoint:
    """One subject a function serves."""

    name: str
    subject: str
    handler: Handler
    max_in_flight: int = DEFAULT_LIMITS.max_in_flight
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServiceSpec:
    """A function as a NATS service: its name is also the queue group of its endpoints."""

    name: str
    kind: str
    endpoints: tuple[Endpoint, ...]
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


_beats: set[asyncio.Task[None]] = set()  # keep-alives being sent


class _KeepAlive:
    """While a request runs, tell its requester every `interval` seconds that it does."""

    def __init__(self, conn: Connection, reply: str, interval: float) -> None:
        self.conn = conn
        self.reply = reply
        self.interval = interval
        self.loop = asyncio.get_running_loop()
        self.timer = self.loop.call_later(interval, self._beat)

    def _beat(self) -> None:
        # The loop holds tasks weakly: without a reference a beat could be collected mid-send.
        # Held apart from this object, which is dropped when its request ends.
        task = self.loop.create_task(self._send())
        _beats.add(task)
        task.add_done_callback(_beats.discard)
        self.timer = self.loop.call_later(self.interval, self._beat)

    async def _send(self) -> None:
        try:
            await self.conn.client.publish(self.reply, b"", headers={WORKING: "1"})
        except nats.errors.Error:
            pass  # disconnected: the requester's silence limit decides

    def stop(self) -> None:
        self.timer.cancel()


class Reporting(Protocol):
    """Work a service does off its endpoints (an agent's task queue), shown as one more
    endpoint in `$SRV.INFO` and `$SRV.STATS`."""

    def info(self) -> EndpointInfo: ...

    def stats(self) -> EndpointStats: ...


@dataclass
class EndpointCounts:
    """What `$SRV.STATS` reports of an endpoint: its requests, errors, last error and time
    spent, counted by whoever serves it (a subscribed endpoint, an agent's task queue)."""

    num_requests: int = 0
    num_errors: int = 0
    last_error: str = ""
    processing_ns: int = 0

    def failed(self, error: str) -> None:
        self.num_errors += 1
        self.last_error = error

    def stats(self, name: str, subject: str, queue_group: str) -> EndpointStats:
        return EndpointStats(
            name=name,
            subject=subject,
            queue_group=queue_group,
            num_requests=self.num_requests,
            num_errors=self.num_errors,
            last_error=self.last_error,
            processing_time=self.processing_ns,
            average_processing_time=self.processing_ns // max(1, self.num_requests),
        )


class _Served:
    """A subscribed endpoint: bounded concurrency and the counters `$SRV.STATS` reports."""

    def __init__(
        self,
        conn: Connection,
        endpoint: Endpoint,
        queue: str,
        timeouts: Timeouts,
        max_depth: int = DEFAULT_LIMITS.max_depth,
    ) -> None:
        self.conn = conn
        self.endpoint = endpoint
        self.queue = queue
        self.keepalive = timeouts.keepalive
        self.late_reply = timeouts.late_reply
        self.max_depth = max_depth
        self.slots = Slots(endpoint.max_in_flight)
        self.tasks: set[asyncio.Task[None]] = set()
        self.subscription: Subscription | None = None
        self.counts = EndpointCounts()

    async def start(self) -> None:
        self.subscription = await self.conn.client.subscribe(
            self.endpoint.subject, queue=self.queue, cb=self._on_message
        )

    async def _on_message(self, msg: Msg) -> None:
        if msg.reply and not subjects.is_inbox(msg.reply):
            self._refuse(msg)
            return
        # Waiting for a slot here holds back this subscription only: that is the bound.
        await self.slots.acquire()
        task = asyncio.create_task(self._serve(msg))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def _serve(self, msg: Msg) -> None:
        started = time.perf_counter_ns()
        self.counts.num_requests += 1
        beats = _KeepAlive(self.conn, msg.reply, self.keepalive) if msg.reply else None
        try:
            if deadline_passed(msg.headers):
                raise DeadlineExceeded("the rollout's deadline passed before this call started")
            data = await check_out(self.conn, msg.data, msg.headers, release_it=True)
            if nested_deeper(data, self.max_depth):
                raise BadRequest(f"the request nests deeper than {self.max_depth} levels")
            reply = await self.endpoint.handler(data, msg.headers or {})
            headers = None
        except GymError as exc:
            reply, headers = self._failed(exc)
        except Exception as exc:  # a function's bug must not kill its worker
            log.exception("%s failed", self.endpoint.subject)
            failure = FunctionFailed(f"{self.endpoint.name} raised {type(exc).__name__}; see the worker log")
            reply, headers = self._failed(failure)
        finally:
            if beats is not None:
                beats.stop()
        self.counts.processing_ns += time.perf_counter_ns() - started
        if msg.reply:
            await self._respond(msg.reply, reply, headers)

    def _refuse(self, msg: Msg) -> None:
        """A request whose reply subject is not an inbox: not served, and not answered. Its
        sender may not publish there itself and wants this service to do it for it (an
        empty answer or keep-alive on `$JS.API.STREAM.PURGE.<stream>` purges the stream)."""
        self.counts.num_requests += 1
        self.counts.failed(f"{BadRequest.code}:reply subject is not an inbox")
        if self.counts.num_errors <= 10 or self.counts.num_errors % 1000 == 0:
            log.warning("%s: refused a request whose reply subject %r is not an inbox (%d errors so far)",
                        self.endpoint.subject, msg.reply[:100], self.counts.num_errors)  # fmt: skip

    def _failed(self, exc: GymError) -> tuple[bytes, dict[str, str]]:
        self.counts.failed(f"{exc.code}:{exc.message}")
        return encode_error_reply(exc)

    async def _respond(self, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        """Answer on the inbox `subject`; a reply too big for one message goes by claim check,
        addressed to the requester, and one that cannot go is an error reply saying why."""
        try:
            if needs_claim(self.conn, data):
                data, headers = await check_in(self.conn, subject, data, headers, ttl=self.late_reply)
            await self.conn.client.publish(subject, data, headers=headers)
        except GymError as exc:  # the claim store is full, or the bus away
            exc.message = f"reply of {len(data)} bytes could not be sent: {exc.message}"
            exc.subject = self.endpoint.subject
            body, headers = encode_error_reply(exc)
            await self.conn.client.publish(subject, body, headers=headers)
        except MaxPayloadError:
            message = f"reply of {len(data)} bytes is over the max payload"
            body, headers = encode_error_reply(PayloadTooLarge(message, subject=self.endpoint.subject))
            await self.conn.client.publish(subject, body, headers=headers)

    def info(self) -> EndpointInfo:
        e = self.endpoint
        return EndpointInfo(name=e.name, subject=e.subject, queue_group=self.queue, metadata=e.metadata)

    def stats(self) -> EndpointStats:
        return self.counts.stats(self.endpoint.name, self.endpoint.subject, self.queue)


class _GymService(Service):
    """`nats.micro`'s Services API control plane, reporting our endpoints."""

    def __init__(self, conn: Connection, spec: ServiceSpec) -> None:
        metadata = {"kind": spec.kind, **spec.metadata}
        config = ServiceConfig(
            name=spec.name, version=VERSION, description=spec.description, metadata=metadata
        )
        super().__init__(conn.client, config)
        self.served: list[_Served] = []
        self.reporting: Sequence[Reporting] = ()

    # nats.micro answers `$SRV.PING/INFO/STATS` itself; like our endpoints, only on an inbox.
    # nats-py 2.16's `micro.Service` has no hook to filter those requests: these three
    # override its private handlers, the one place that does.
    async def _handle_ping_request(self, msg: Msg) -> None:
        if subjects.is_inbox(msg.reply):
            await super()._handle_ping_request(msg)

    async def _handle_info_request(self, msg: Msg) -> None:
        if subjects.is_inbox(msg.reply):
            await super()._handle_info_request(msg)

    async def _handle_stats_request(self, msg: Msg) -> None:
        if subjects.is_inbox(msg.reply):
            await super()._handle_stats_request(msg)

    def info(self) -> ServiceInfo:
        info = super().info()
        info.endpoints = [one.info() for one in (*self.served, *self.reporting)]
        return info

    def stats(self) -> ServiceStats:
        stats = super().stats()
        stats.endpoints = [one.stats() for one in (*self.served, *self.reporting)]
        return stats


class ServiceHost:
    """Serves functions on one connection until `stop()`.

    `stop()` is graceful: it stops taking requests (unsubscribes), lets in-flight
    requests finish for up to `timeouts.drain` seconds, then leaves the service.
    """

    def __init__(self, conn: Connection, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        self.conn = conn
        self.timeouts = timeouts
        self.services: list[_GymService] = []

    async def add(self, spec: ServiceSpec, reporting: Sequence[Reporting] = ()) -> None:
        """Register `spec` and start serving its endpoints (routable once this returns);
        `reporting` adds counters of work the service does elsewhere to its stats."""
        service = _GymService(self.conn, spec)
        service.reporting = reporting
        for endpoint in spec.endpoints:
            served = _Served(self.conn, endpoint, queue=spec.name, timeouts=self.timeouts)
            await served.start()
            service.served.append(served)
        await service.start()
        # An endpoint is not routable before the server has the SUB. The start-up budget, not
        # nats-py's 10 s: on a saturated machine the round trip alone has taken longer.
        await self.conn.client.flush(timeout=int(self.timeouts.worker_start))
        self.services.append(service)
        log.info("serving %s (%s): %s", spec.name, spec.kind, ", ".join(e.subject for e in spec.endpoints))

    async def stop(self) -> None:
        served = [s for service in self.services for s in service.served]
        for one in served:
            if one.subscription is not None:
                await one.subscription.unsubscribe()
        pending = [task for one in served for task in one.tasks]
        if pending:
            await asyncio.wait(pending, timeout=self.timeouts.drain)
        for service in self.services:
            await service.stop()
        self.services.clear()

    def stats(self) -> list[ServiceStats]:
        return [service.stats() for service in self.services]
