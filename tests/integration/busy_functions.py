"""Environments whose calls hold the CPU for long, for `test_busy_workers`: `gym-runner`
with two more environments (`python -m tests.integration.busy_functions serve ...`).

`burning` verifies by computing in Python for `BURN` seconds (a slow scorer); `slow_import`
imports, on its first verify, a module whose import computes for as long (a library
imported on first use). Both declare `cpu_bound`, as a heavy function does.
"""

from __future__ import annotations

import time

from gymbus.functions import Environment, Session
from gymbus.functions.registry import REGISTRY
from gymbus.schemas import VerifyRequest, VerifyResult

BURN = 8.0
"""Seconds each call computes: more than the bus's silence limit and its server's pings."""


def burn(seconds: float) -> None:
    """Hold the interpreter for `seconds` (wall clock: on a busy machine, less CPU time)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def burning_verify(request: VerifyRequest, session: Session) -> VerifyResult:
    print("burning: verifying", flush=True)  # tests wait for a call in progress
    burn(BURN)
    return VerifyResult(reward=1.0)


async def importing_verify(request: VerifyRequest, session: Session) -> VerifyResult:
    from tests.integration import slow_module

    return VerifyResult(reward=slow_module.REWARD)


BUSY = (
    Environment("burning", burning_verify, agents=("burning_agent",), cpu_bound=True),
    Environment("slow_import", importing_verify, agents=("slow_import_agent",), cpu_bound=True),
)


def register() -> None:
    REGISTRY.add(BUSY, f"module {__name__}")


if __name__ == "__main__":
    register()
    from gymbus.runner.cli import main

    main()
