"""Naming why a rollout failed, stage by stage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gymbus.schemas import DeadlineExceeded, GymError, RolloutFailed

__all__ = ["failing_as"]


@asynccontextmanager
async def failing_as(failure_class: str) -> AsyncIterator[None]:
    """Turn a `GymError` raised inside into `RolloutFailed(failure_class)`.

    A passed deadline is always `deadline_exceeded`, whatever stage it hit.
    """
    try:
        yield
    except RolloutFailed:
        raise
    except DeadlineExceeded as exc:
        raise RolloutFailed("deadline_exceeded", str(exc)) from exc
    except GymError as exc:
        raise RolloutFailed(failure_class, str(exc)) from exc
