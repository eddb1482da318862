"""`gym-runner front`: NeMo Gym's HTTP API in front of the agents on the bus, until stopped.

1. Connect (`NATS_URL`) and find the agents to front (named, or every one a live worker
   serves), waiting up to `Timeouts.worker_start` for named ones to come up.
2. Bind the head server's port and a free port for each other server (`Layout`).
3. Serve until SIGINT or SIGTERM; then stop taking requests, and end the run: rollouts
   still queued are withdrawn (their clients get 503).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gymbus.bus import nats_url_from_env, open_bus
from gymbus.bus.front import FrontBus, ServedAgent
from gymbus.schemas import DEFAULT_TIMEOUTS, BusUnavailable, Timeouts

from ._http import app_for
from ._layout import Layout

__all__ = ["FrontOptions", "run_front"]

log = logging.getLogger("gymbus.front")

DEFAULT_HEAD_PORT = 11000
"""NeMo Gym's own default, so its clients find the head server without being told."""


@dataclass(frozen=True)
class FrontOptions:
    agents: tuple[str, ...] = ()
    """Agents to front; none: every agent a live worker serves."""
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
            agents = await _agents(front, options)
            layout = Layout.plan(agents, options.host, options.head_port)
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


async def _agents(front: FrontBus, options: FrontOptions) -> list[ServedAgent]:
    deadline = time.monotonic() + options.timeouts.worker_start
    while True:
        served = await front.served_agents()
        missing = [name for name in options.agents if name not in served]
        if not missing and served:
            names = options.agents or tuple(sorted(served))
            return [served[name] for name in names]
        if time.monotonic() > deadline:
            wanted = ", ".join(missing) if missing else "any agent"
            raise BusUnavailable(f"no worker serves {wanted} (start one with `gym-runner serve`)")
        await asyncio.sleep(0.5)


def install_stop(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
