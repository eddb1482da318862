"""Trying a call again: bounded attempts, jittered exponential backoff, never past a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gymbus.schemas import GymError, RetryPolicy

__all__ = ["retrying"]

T = TypeVar("T")


async def retrying(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    should_retry: Callable[[GymError], bool],
    deadline: float | None = None,
    on_retry: Callable[[GymError], None] | None = None,
) -> T:
    """`await call()`, tried again while it raises an error `should_retry` accepts, up to
    `policy.attempts` tries, and only while the wait ends before `deadline` (unix time).
    The last error is raised as it is."""
    for retry in range(policy.attempts):
        try:
            return await call()
        except GymError as exc:
            wait = policy.delay(retry)
            late = deadline is not None and time.time() + wait >= deadline
            if retry + 1 >= policy.attempts or late or not should_retry(exc):
                raise
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")
