"""Opening a JetStream KV bucket, creating it on first use with the connection's replica count
(and waiting out a cluster that is still settling)."""

from __future__ import annotations

import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from ._connection import Connection
from ._forming import retry_while_forming

__all__ = ["open_key_value"]


async def open_key_value(conn: Connection, bucket: str, ttl: float) -> KeyValue:
    """`bucket`, created if missing: on disk, one value per key, each expiring `ttl` seconds
    after its last write."""
    js = conn.js

    async def open_or_create() -> KeyValue:
        try:
            return await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            # Direct gets, so a role's permission can be scoped to the keys it may read.
            config = KeyValueConfig(
                bucket=bucket, ttl=ttl, storage=StorageType.FILE, history=1, direct=True,
                replicas=conn.replicas,
            )  # fmt: skip
            return await js.create_key_value(config)

    return await retry_while_forming(conn, open_or_create)
