"""Verdicts on finished rollouts, asked for outside any rollout (`gym-runner verify`).

Each row gets a fresh session and the verify deadline (`Timeouts.verify`); a transient
failure (the environment's worker restarting, say) is tried again until that deadline,
as an agent's own verify call is. A row nobody serves fails at once (`NoResponders`).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from gymbus.schemas import CALL_RETRY, DEADLINE, DEFAULT_TIMEOUTS, SESSION, GymError, Timeouts

from ..wire import request, retrying, subjects

if TYPE_CHECKING:
    from ..connection import Bus

__all__ = ["Verifier"]


class Verifier:
    """Asks environments' `gym.env.<env>.verify` for verdicts over one connection."""

    def __init__(self, bus: Bus, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        self._conn = bus.conn
        self._timeouts = timeouts

    async def verdict(self, environment: str, row: bytes) -> bytes:
        """`environment`'s reply to `row` (a rollout with its `response`); the `GymError`
        of the last try if none came."""
        deadline = time.time() + self._timeouts.verify
        headers = {SESSION: uuid.uuid4().hex, DEADLINE: f"{deadline:.3f}"}
        subject = subjects.env_verify(environment)

        async def once() -> bytes:
            left = max(0.001, deadline - time.time())
            return await request(self._conn, subject, row, timeout=left, headers=headers)

        return await retrying(once, CALL_RETRY, should_retry=_transient, deadline=deadline)


def _transient(error: GymError) -> bool:
    return error.transient
