"""`Connection`: one connection to the bus and what this process keeps per connection.

Every bus function takes it instead of nats-py's client: it owns the client, its JetStream
context, the replica count of what it creates, the subjects the server refused it, since
when it has been without a server, and the reply inbox of its requests (`wire`'s). It
lives in the bottom room, because setting up storage already needs its replica count and
refusals; `connection.connect` makes one.
"""

from __future__ import annotations

import math
import time
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from gymbus.schemas import DEFAULT_TIMEOUTS

__all__ = ["Connection"]

_KEPT_REFUSALS = 100
"""How many of the server's refusals a connection keeps: the latest are what a check asks about."""


class Connection:
    """A connection to the bus (`connection.connect` makes it; `close` ends it).

    nats-py reports a subject the role may not use asynchronously, as an error on the
    connection, never as a reply: `refused` records it, for `check_permitted` and for
    set-up that is about to ask again (`was_refused`).
    """

    def __init__(
        self, client: Client, *, timeout: float = DEFAULT_TIMEOUTS.connect, replicas: int = 1
    ) -> None:
        self.client = client
        self.js: JetStreamContext = client.jetstream(timeout=timeout)
        """Its JetStream context, whose API requests wait up to `timeout` seconds."""
        self.replicas = replicas
        """How many servers keep a copy of each stream and bucket this connection creates."""
        self.refusals: list[str] = []
        """The server's messages refusing this connection a subject, latest last."""
        self.lost_since: float | None = None
        """When (`time.monotonic`) it lost its server, while it has not found one again."""
        self.requester: object | None = None
        """The reply inbox of its requests (`wire`'s), made on the first request."""

    @property
    def is_closed(self) -> bool:
        return self.client.is_closed

    def refused(self, message: str) -> None:
        """Record the server's refusal of a subject (`message`, its error text)."""
        self.refusals.append(message)
        del self.refusals[:-_KEPT_REFUSALS]

    def was_refused(self) -> bool:
        """Whether the server has refused any subject this connection tried to use."""
        return bool(self.refusals)

    def lost(self) -> None:
        """The server is gone (not on purpose): from now it counts as lost, until `found`."""
        if not self.client.is_closed and self.lost_since is None:
            self.lost_since = time.monotonic()

    def found(self) -> None:
        """It has a server again."""
        self.lost_since = None

    def lost_for(self) -> float:
        """Seconds it has been without a server (0 while connected; infinite once closed)."""
        if self.client.is_closed:
            return math.inf
        since = self.lost_since
        return 0.0 if since is None or self.client.is_connected else time.monotonic() - since

    def server_info(self) -> dict[str, Any]:
        """The INFO the server sent when this connection was made (or last remade)."""
        # nats-py 2.16 keeps it as a private attribute with no public accessor (it hands it
        # only to `reconnect_to_server_handler`): this is the one place that reads it.
        return dict(self.client._server_info)

    async def close(self) -> None:
        """Close the connection at once (nats-py's `close`; `Bus.close` drains first)."""
        await self.client.close()
