"""A collection whose result writer or deadline keeper dies ends with that error, not a hang."""

from __future__ import annotations

import asyncio

import pytest

from gymbus.runner.collection._collect import _supervised


async def test_a_helper_that_dies_ends_the_work_with_its_error() -> None:
    async def disk_full() -> None:
        await asyncio.sleep(0.05)
        raise OSError(28, "No space left on device")

    work = asyncio.create_task(asyncio.sleep(3600, result="never"))
    with pytest.raises(OSError, match="No space left"):
        await asyncio.wait_for(_supervised(work, asyncio.create_task(disk_full()), None), 5)
    assert work.cancelled()


async def test_the_work_result_when_it_finishes_first() -> None:
    helper = asyncio.create_task(asyncio.sleep(3600))
    work = asyncio.create_task(asyncio.sleep(0.01, result={"skipped": 0}))
    assert await asyncio.wait_for(_supervised(work, helper), 5) == {"skipped": 0}
    assert not helper.done()
    helper.cancel()
