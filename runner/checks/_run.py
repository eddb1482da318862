"""Running `gym-runner check`: the sample row, the bus, and (on the embedded server) a worker
serving the environment for the length of the check."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec

from gymbus.bus import ServeOptions, open_bus
from gymbus.functions import ModelOptions
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import DEFAULT_TIMEOUTS, Timeouts

from .._input import check_row, read_lines
from .._sources import absolute, environment_in, is_source
from .._workers import WorkerProcesses, start_workers, stop_workers
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
    """Check `env` (a name, or a Python file or module that defines one environment) on the
    bus at `nats_url`; with none, on an embedded server where a worker this starts serves it
    (a built-in, installed or given environment), with the offline policy as `policy` for
    verifiers that call a judge."""
    served = absolute(env)  # what the worker is given: the file itself, or the name
    if is_source(env):
        env = environment_in(env)
    known = ENVIRONMENTS.get(env)
    contract = EnvironmentContract.of(known, row) if known else EnvironmentContract.from_row(env, row)
    if nats_url is None and known is None:
        raise ValueError(
            f"{env!r} is neither a built-in nor an installed environment: to check one served "
            "elsewhere, set NATS_URL to its bus"
        )
    async with open_bus(nats_url, name="gym-runner check", timeouts=timeouts) as bus:
        if bus.embedded is None:
            return await check_environment(bus, contract, timeouts)
        with tempfile.TemporaryDirectory(prefix="gymbus-check-") as work:
            serve = ServeOptions(functions=(served, "offline"), model=ModelOptions(), timeouts=timeouts)
            workers = WorkerProcesses(serve, bus.url, Path(work) / "worker.log", auth=bus.worker_auth())
            supervised = await start_workers(bus, [(workers, [env, "policy"])], timeouts)
            try:
                # The embedded server's runner may not call seed and tools: its workers may.
                worker = bus.worker_auth()
                async with open_bus(
                    bus.url, name="gym-runner check", timeouts=timeouts, auth=worker, role="worker"
                ) as calls:
                    return await check_environment(calls, contract, timeouts, monitor=bus)
            finally:
                await stop_workers(supervised, timeouts.drain)
