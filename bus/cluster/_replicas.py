"""How many servers keep a copy of each stream and KV bucket GymBus creates.

One on a single server; three in a cluster (JetStream R3: any one server may be lost).
Set per connection (`connect(replicas=...)`), by default from `GYMBUS_REPLICAS`. It
applies when a stream or bucket is created; one that exists keeps its count.
"""

from __future__ import annotations

import os
import weakref

from nats.aio.client import Client
from nats.js import JetStreamContext

__all__ = ["replicas_from_env", "replicas_of", "set_replicas"]

_replicas: weakref.WeakKeyDictionary[Client, int] = weakref.WeakKeyDictionary()


def replicas_from_env() -> int:
    """`GYMBUS_REPLICAS` (1 when unset); `ValueError` for anything but 1 to 5."""
    value = os.environ.get("GYMBUS_REPLICAS") or "1"
    if not value.isdigit() or not 1 <= int(value) <= 5:
        raise ValueError(f"GYMBUS_REPLICAS must be a number from 1 to 5, not {value!r}")
    return int(value)


def set_replicas(nc: Client, replicas: int) -> None:
    _replicas[nc] = replicas


def replicas_of(connection: Client | JetStreamContext) -> int:
    """The replica count set for `connection` (or its JetStream context's), else 1."""
    nc = connection if isinstance(connection, Client) else getattr(connection, "_nc", None)
    return _replicas.get(nc, 1) if isinstance(nc, Client) else 1
