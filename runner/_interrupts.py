"""Stopping a command the way a terminal user expects: Ctrl-C once to finish what is in
flight, twice to stop now.

A terminal sends SIGINT to its whole foreground process group; the processes a command
starts live in sessions of their own, so the signal reaches only the command, which
stops them in order. `timeout` sends its signal to the command and again to its process
group, so a signal within `Timeouts.repeat_signal` of the first counts as the same one.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

from gymbus.schemas import DEFAULT_TIMEOUTS

__all__ = ["Interrupts", "interrupted_exit_code"]

_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def interrupted_exit_code(signum: int | None) -> int:
    """The shell's code for a command ended by `signum`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (signum or signal.SIGINT)


class Interrupts:
    """Handles SIGINT and SIGTERM in the running loop: the first sets `stop` and says so
    through `note`; a later one cancels the task that created this."""

    def __init__(
        self,
        stop: asyncio.Event,
        finishing: str,
        note: Callable[[str], None],
        repeat: float = DEFAULT_TIMEOUTS.repeat_signal,
    ) -> None:
        self.stop = stop
        self.finishing = finishing
        self.note = note
        self.repeat = repeat
        self.signal: int | None = None
        self.first_at = 0.0
        self.main = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._received, signum)

    @property
    def exit_code(self) -> int:
        return interrupted_exit_code(self.signal)

    def _received(self, signum: int) -> None:
        now = time.monotonic()
        if self.signal is None:
            self.signal, self.first_at = signum, now
            self.stop.set()
            again = _NAMES.get(signal.Signals(signum), "the signal")
            self.note(f"stopping: {self.finishing} ({again} again to stop now)")
        elif now - self.first_at > self.repeat and self.main is not None:
            self.main.cancel()
