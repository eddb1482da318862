"""Retries: bounded, jittered, deadline-aware, and only for errors the caller accepts."""

from __future__ import annotations

import time

import pytest

from gymbus import schemas
from gymbus.bus.wire import retrying
from gymbus.schemas import RetryPolicy

FAST = RetryPolicy(attempts=4, base=0.001, cap=0.01)


async def test_a_transient_failure_is_tried_again_and_counted() -> None:
    failures = [schemas.UpstreamFailed("429"), schemas.RequestTimeout("slow")]
    counted: list[schemas.GymError] = []

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    assert await retrying(call, FAST, should_retry=lambda e: e.transient, on_retry=counted.append) == "ok"
    assert [type(e) for e in counted] == [schemas.UpstreamFailed, schemas.RequestTimeout]


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    tries = 0

    async def call() -> None:
        nonlocal tries
        tries += 1
        raise schemas.UpstreamFailed(f"try {tries}")

    with pytest.raises(schemas.UpstreamFailed, match="try 4"):
        await retrying(call, FAST, should_retry=lambda e: True)
    assert tries == 4


async def test_a_permanent_failure_is_not_retried() -> None:
    tries = 0

    async def call() -> None:
        nonlocal tries
        tries += 1
        raise schemas.BadRequest("bad")

    with pytest.raises(schemas.BadRequest):
        await retrying(call, FAST, should_retry=lambda e: e.transient)
    assert tries == 1


async def test_no_retry_waits_past_the_deadline() -> None:
    tries = 0

    async def call() -> None:
        nonlocal tries
        tries += 1
        raise schemas.UpstreamFailed("down")

    slow = RetryPolicy(attempts=10, base=5.0, cap=5.0)
    started = time.monotonic()
    with pytest.raises(schemas.UpstreamFailed):
        await retrying(call, slow, should_retry=lambda e: True, deadline=time.time() + 1.0)
    assert tries == 1 and time.monotonic() - started < 1.0


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(attempts=10, base=1.0, cap=8.0)
    assert all(0.5 <= policy.delay(0) < 1.5 for _ in range(100))
    assert all(4.0 <= policy.delay(10) < 12.0 for _ in range(100))
    assert len({policy.delay(3) for _ in range(20)}) > 1


def test_transient_errors_are_the_ones_a_retry_can_fix() -> None:
    transient = {
        kind
        for kind in (
            schemas.NoResponders,
            schemas.RequestTimeout,
            schemas.UpstreamFailed,
            schemas.BusUnavailable,
        )
    }
    for kind in (
        schemas.BadRequest,
        schemas.NotFound,
        schemas.FunctionFailed,
        schemas.DeadlineExceeded,
        schemas.PayloadTooLarge,
    ):
        assert not kind.transient
    assert all(kind.transient for kind in transient)
