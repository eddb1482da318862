"""Running `gym-runner check`: the sample row, the bus, and (on the embedded server) a worker
serving the environment for the length of the check."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from gymbus.bus import ServeOptions, connect, open_bus, wait_served
from gymbus.functions import ENVIRONMENTS, ModelOptions
from gymbus.schemas import DEFAULT_TIMEOUTS, Timeouts

from .._input import check_row, read_lines
from .._workers import WorkerProcesses
from ._check import CheckItem, check_environment
from ._contract import EnvironmentContract

__all__ = ["run_check", "sample_row"]


async def sample_row(path: Path, line: int | None) -> dict[str, Any]:
    """Row `line` of a JSONL file (default: its first row), checked as `collect` checks rows."""
    async for number, text in read_lines(path):
        if line is None or number == line:
            check_row(text, str(path), number)  # InputError names what is wrong with it
            return msgspec.json.decode(text, type=dict[str, Any])
    raise ValueError(f"{path} has no row" + (f" at line {line}" if line else ""))


async def run_check(
    env: str, row: dict[str, Any] | None, nats_url: str | None, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> list[CheckItem]:
    """Check `env` on the bus at `nats_url`; with none, on an embedded server where a worker
    this starts serves it (a built-in environment), with the offline policy as `policy` for
    verifiers that call a judge."""
    builtin = ENVIRONMENTS.get(env)
    contract = EnvironmentContract.of(builtin, row) if builtin else EnvironmentContract.from_row(env, row)
    if nats_url is None and builtin is None:
        raise ValueError(
            f"{env!r} is not a built-in environment: to check one served elsewhere, set NATS_URL to its bus"
        )
    async with open_bus(nats_url, name="gym-runner check", timeouts=timeouts) as bus:
        if bus.embedded is None:
            return await check_environment(bus.nc, contract, timeouts)
        with tempfile.TemporaryDirectory(prefix="gymbus-check-") as work:
            serve = ServeOptions(functions=(env, "offline"), model=ModelOptions(), timeouts=timeouts)
            workers = WorkerProcesses(serve, bus.url, Path(work) / "worker.log", auth=bus.worker_auth())
            workers.start()
            try:
                await wait_served(bus.nc, [env, "policy"], timeout=timeouts.worker_start, check=workers.check)
                # The embedded server's runner may not call seed and tools: its workers may.
                calls = await connect(bus.url, name="gym-runner check", auth=bus.worker_auth(), role="worker")
                try:
                    return await check_environment(calls, contract, timeouts, monitor=bus.nc)
                finally:
                    await calls.close()
            finally:
                # In a thread: the connection keeps answering the server's pings meanwhile.
                await asyncio.to_thread(workers.stop, timeouts.drain)
