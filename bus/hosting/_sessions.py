"""Per-rollout session state in a JetStream KV bucket, so any replica can serve any call.

One bucket, `gym_sessions`; a key per environment and session (`<env>.<session id>`).
Every key expires `ttl` seconds after its last write, so the state of an abandoned
rollout (its worker killed, its runner gone) is cleaned up without anyone's help.
"""

from __future__ import annotations

import nats.js.errors
from nats.js.kv import KeyValue

from gymbus.schemas import DEFAULT_TIMEOUTS

from ..cluster import Connection, open_key_value
from ..wire import SESSIONS_BUCKET, is_name

__all__ = ["KvSessions"]


class KvSessions:
    """Session state of one environment: `get`/`put` by session id."""

    def __init__(self, kv: KeyValue, environment: str) -> None:
        self.kv = kv
        self.environment = environment

    @classmethod
    async def open(
        cls, conn: Connection, environment: str, ttl: float = DEFAULT_TIMEOUTS.session_ttl
    ) -> KvSessions:
        """Open (creating if needed) the sessions bucket, for `environment`."""
        return cls(await open_key_value(conn, SESSIONS_BUCKET, ttl), environment)

    def _key(self, session_id: str) -> str | None:
        return f"{self.environment}.{session_id}" if is_name(session_id) else None

    async def get(self, session_id: str) -> bytes | None:
        """The state saved for `session_id`, or `None` (never saved, or expired)."""
        key = self._key(session_id)
        if key is None:
            return None
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value

    async def put(self, session_id: str, value: bytes) -> None:
        key = self._key(session_id)
        if key is None:
            raise ValueError(f"session id {session_id!r} is not a valid key")
        await self.kv.put(key, value)
