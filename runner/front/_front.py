"""`gym-runner front`: NeMo Gym's HTTP API in front of the agents on the bus, until stopped.

1. Connect (`NATS_URL`) and find what to front: the agents and environments named, or
   every agent and environment a live worker serves. What no live worker serves yet is
   waited for, up to `Timeouts.worker_start`, saying every `SAY_EVERY` seconds what it
   waits for; SIGINT or SIGTERM ends the wait at once. A name that is neither served nor
   one GymBus or an installed package defines, but close to one that is, is a misspelling:
   refused at once, with the names it is close to. One close to nothing is waited for (a
   user's own agent, served from a file, may still be starting).
2. Bind the head server's port and a free port for each other server (`Layout`).
3. Serve until SIGINT or SIGTERM; then stop taking requests, and end the run: rollouts
   still queued are withdrawn (their clients get 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gymbus.bus import nats_url_from_env, not_served, open_bus
from gymbus.bus.front import FrontBus, Served, ServedAgent
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import DEFAULT_TIMEOUTS, BusUnavailable, Timeouts

from .._input import UnknownAgent, nearest
from ._http import app_for
from ._layout import Layout

__all__ = ["FrontOptions", "run_front"]

log = logging.getLogger("gymbus.front")

DEFAULT_HEAD_PORT = 11000
"""NeMo Gym's own default, so its clients find the head server without being told."""
SAY_EVERY = 10.0
"""While it waits for workers, the front says what it waits for this often (seconds)."""
WAIT_STEP = 0.5
"""Seconds between looks for workers while waiting (each look gathers for `Timeouts.discovery`)."""


@dataclass(frozen=True)
class FrontOptions:
    agents: tuple[str, ...] = ()
    """Agents and environments to front; none: every one a live worker serves."""
    host: str = "127.0.0.1"
    head_port: int = DEFAULT_HEAD_PORT
    nats_url: str | None = None
    timeouts: Timeouts = DEFAULT_TIMEOUTS


async def run_front(
    options: FrontOptions, stop: asyncio.Event, ready: Callable[[Layout], None] = lambda _: None
) -> None:
    """Serve the front until `stop` is set; `ready` hears the layout once every port answers."""
    if not (options.nats_url or nats_url_from_env()):
        raise BusUnavailable("the front needs the bus its workers are on: set NATS_URL")
    async with open_bus(options.nats_url, name="gym-runner front", timeouts=options.timeouts) as bus:
        front = await FrontBus.open(bus, timeouts=options.timeouts)
        try:
            fronted = await _fronted(front, options, stop)
            if fronted is None:
                return
            layout = Layout.plan(fronted.agents, options.host, options.head_port, fronted.environments)
            runners = []
            try:
                for server in layout.servers:
                    runner = web.AppRunner(app_for(server, layout, front), access_log=None)
                    await runner.setup()
                    runners.append(runner)
                    await web.SockSite(runner, server.sock, shutdown_timeout=1.0).start()
                ready(layout)
                await stop.wait()
            finally:
                for runner in runners:
                    await runner.cleanup()
                layout.close()
        finally:
            await front.close()


@dataclass(frozen=True)
class Fronted:
    """What one front stands in front of."""

    agents: list[ServedAgent]
    environments: list[str]
    """Environments fronted as resources servers, beside the agents' own."""


async def _fronted(front: FrontBus, options: FrontOptions, stop: asyncio.Event) -> Fronted | None:
    """What to front, once live workers serve it (module docstring, step 1); `None` if
    `stop` is set first."""
    deadline = time.monotonic() + options.timeouts.worker_start
    said_at = -SAY_EVERY
    before: Served | None = None
    while True:
        served = await front.served()
        missing = [name for name in options.agents if name not in {*served.agents, *served.environments}]
        if _complete(options.agents, missing, served, before):
            return _chosen(options.agents, served)
        before = served
        _refuse_misspelt(missing, served)
        wanted = " or ".join(missing) if missing else "any agent or environment"
        hint = f"start one with `gym-runner serve {' '.join(missing) or 'NAME ...'}`"
        left = deadline - time.monotonic()
        if left <= 0:
            waited = options.timeouts.worker_start
            raise BusUnavailable(f"{not_served(wanted, hint)} (waited {waited:.0f} s)")
        if time.monotonic() - said_at >= SAY_EVERY and (missing or not _any(served)):
            said_at = time.monotonic()
            log.warning("waiting for a live worker serving %s (%s); giving up in %.0f s", wanted, hint, left)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=WAIT_STEP)
            return None


def _complete(names: tuple[str, ...], missing: list[str], served: Served, before: Served | None) -> bool:
    """Whether to front what is `served` now: every one of `names`; none named, something,
    and nothing new since the look `before` (a worker adds its functions one by one)."""
    if names:
        return not missing
    return _any(served) and served == before


def _any(served: Served) -> bool:
    return bool(served.agents or served.environments)


def _chosen(names: tuple[str, ...], served: Served) -> Fronted:
    """The agents and environments `names` says (each served), or, none named, all served."""
    if not names:
        return Fronted([served.agents[name] for name in sorted(served.agents)], sorted(served.environments))
    agents = [served.agents[name] for name in names if name in served.agents]
    return Fronted(agents, [name for name in names if name not in served.agents])


def _refuse_misspelt(missing: list[str], served: Served) -> None:
    """`UnknownAgent` for the first of `missing` that reads as a misspelling (module
    docstring, step 1)."""
    known = {*AGENTS, *ENVIRONMENTS, *served.agents, *served.environments}
    for name in missing:
        close = nearest(name, known) if name not in known else ""
        if close:
            raise UnknownAgent(f"{name}: no agent or environment of that name{close}", usage=True)


def install_stop(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
