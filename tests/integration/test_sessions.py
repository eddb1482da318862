"""Session state in the KV bucket: shared across replicas, keyed per environment."""

from __future__ import annotations

from gymbus import bus
from gymbus.bus import Connection


async def test_state_written_by_one_replica_is_read_by_another(nc: Connection, nats_url: str) -> None:
    other = await bus.connect(nats_url, name="replica-b")
    try:
        first = await bus.hosting.KvSessions.open(nc, "counter_env")
        second = await bus.hosting.KvSessions.open(other, "counter_env")
        await first.put("abc123", b'{"count": 3}')
        assert await second.get("abc123") == b'{"count": 3}'
        elsewhere = await bus.hosting.KvSessions.open(nc, "another_env")
        assert await elsewhere.get("abc123") is None
        assert await second.get("never-seeded") is None
        assert await second.get("not a valid id") is None
    finally:
        await other.close()
