"""The permission violations the server has reported on each connection.

nats-server reports a subject a role may not use asynchronously, as an error on the
connection, never as a reply; the connection's error callback records them here, where
`check_permitted` and set-up that is about to ask again can read them.
"""

from __future__ import annotations

import weakref

from nats.aio.client import Client
from nats.js import JetStreamContext

__all__ = ["refusals", "was_refused"]

_refusals: weakref.WeakKeyDictionary[Client, list[str]] = weakref.WeakKeyDictionary()


def refusals(nc: Client) -> list[str]:
    """The server's messages refusing `nc` a subject, latest last (a list to append to)."""
    return _refusals.setdefault(nc, [])


def was_refused(connection: Client | JetStreamContext) -> bool:
    """Whether the server has refused any subject this connection (or its JetStream
    context's) tried to use."""
    nc = connection if isinstance(connection, Client) else getattr(connection, "_nc", None)
    return isinstance(nc, Client) and bool(_refusals.get(nc))
