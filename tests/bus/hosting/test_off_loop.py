"""`OffLoop`: a `cpu_bound` call runs in a thread of its own, and its outcome, a result or
an exception, comes back to its caller on the worker's loop."""

from __future__ import annotations

import asyncio
import threading

from gymbus.bus.hosting._threads import OffLoop


async def test_a_call_runs_off_the_loop_and_its_result_comes_back() -> None:
    caller = threading.current_thread()

    async def where() -> threading.Thread:
        return threading.current_thread()

    assert await asyncio.wait_for(OffLoop(2).run(where), 10) is not caller


async def test_every_call_that_raises_gives_its_caller_that_exception() -> None:
    # The loop settles the call after the thread's `except` block may have ended: it raced
    # (about half of such calls never answered their caller).
    async def failing() -> None:
        raise ValueError("the verifier broke")

    off_loop = OffLoop(2)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(off_loop.run(failing) for _ in range(40)), return_exceptions=True), 30
    )
    assert all(isinstance(outcome, ValueError) for outcome in outcomes), outcomes
