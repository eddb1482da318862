"""Once to finish what is in flight, twice to stop now; `timeout`'s double signal is once."""

from __future__ import annotations

import asyncio
import signal

import pytest

from gymbus.runner._interrupts import Interrupts, interrupted_exit_code


async def test_a_repeat_within_the_window_is_the_same_request_to_stop() -> None:
    stop, notes, reached = asyncio.Event(), [], []

    async def main() -> None:
        interrupts = Interrupts(stop, "finishing", notes.append, repeat=0.2)
        interrupts._received(signal.SIGINT)
        interrupts._received(signal.SIGINT)  # `timeout` signals the command, then its group
        await asyncio.sleep(0.3)
        reached.append("not stopped by the repeat")
        interrupts._received(signal.SIGINT)  # a second Ctrl-C, later: stop now
        await asyncio.sleep(10)
        reached.append("not stopped by the second")

    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.create_task(main()), 5)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().remove_signal_handler(signum)
    assert stop.is_set() and reached == ["not stopped by the repeat"]
    assert notes == ["stopping: finishing (Ctrl-C again to stop now)"]


def test_exit_codes_are_the_shells() -> None:
    assert (interrupted_exit_code(signal.SIGINT), interrupted_exit_code(signal.SIGTERM)) == (130, 143)
