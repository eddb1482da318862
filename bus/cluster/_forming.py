"""JetStream set-up (streams, buckets, consumers, a run's key) on a cluster still forming.

A cluster that has just formed, or just lost a server, takes set-up requests before it can
carry them out: a request goes unanswered while the leader of a stream is elected, and a
replicated stream is refused with "no suitable peers for placement" (10005) until the meta
leader has heard from enough servers. Both pass within seconds, so set-up asks again for up
to `Timeouts.cluster_forming`. A single server has nothing to form, and a request its role
may not make (which also goes unanswered) is not asked again: the caller reports it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors

from gymbus.schemas import DEFAULT_TIMEOUTS, Timeouts

from ._connection import Connection

__all__ = ["PEERS_UNKNOWN", "retry_while_forming"]

PEERS_UNKNOWN = 10005
"""The error code of a replicated stream refused while the cluster is forming."""

log = logging.getLogger("gymbus.bus")

T = TypeVar("T")


async def retry_while_forming(
    conn: Connection, call: Callable[[], Awaitable[T]], timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> T:
    """`await call()`, asked again while the cluster behind `conn` is forming."""
    deadline = time.monotonic() + timeouts.cluster_forming
    wait = 0.25
    while True:
        try:
            return await call()
        except (
            TimeoutError,
            nats.errors.TimeoutError,
            nats.js.errors.ServiceUnavailableError,
            nats.js.errors.NoStreamResponseError,  # a stream's leader is being elected
        ) as exc:
            if conn.replicas == 1 or conn.was_refused() or time.monotonic() + wait > deadline:
                raise
            reason = type(exc).__name__
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != PEERS_UNKNOWN or time.monotonic() + wait > deadline:
                raise
            reason = exc.description or "no suitable peers"
        log.info("the JetStream cluster is forming (%s); asking again in %.2f s", reason, wait)
        await asyncio.sleep(wait)
        wait = min(wait * 2, 2.0)
