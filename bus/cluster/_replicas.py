"""How many servers keep a copy of each stream and KV bucket GymBus creates.

One on a single server; three in a cluster (JetStream R3: any one server may be lost).
Set per connection (`connect(replicas=...)`, kept as `Connection.replicas`), by default
from `GYMBUS_REPLICAS`. It applies when a stream or bucket is created; one that exists
keeps its count.
"""

from __future__ import annotations

import os

__all__ = ["replicas_from_env"]


def replicas_from_env() -> int:
    """`GYMBUS_REPLICAS` (1 when unset); `ValueError` for anything but 1 to 5."""
    value = os.environ.get("GYMBUS_REPLICAS") or "1"
    if not value.isdigit() or not 1 <= int(value) <= 5:
        raise ValueError(f"GYMBUS_REPLICAS must be a number from 1 to 5, not {value!r}")
    return int(value)
