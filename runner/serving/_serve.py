"""`gym-runner serve`: worker processes hosting functions until SIGTERM or Ctrl-C.

Each process hosts every named function on one connection (`bus.serve_functions`);
`replicas` processes share each subject through its queue group (and each agent's task
queue through its durable consumer).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import replace

from gymbus.bus import (
    BusAuth,
    EmbeddedServer,
    ServeOptions,
    nats_url_from_env,
    serve_functions,
)

from .._sources import function_names
from .._workers import WorkerProcesses, worker_command

__all__ = ["serve", "worker_command"]

log = logging.getLogger("gymbus.serve")


def _install_stop(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def serve(options: ServeOptions, replicas: int = 1) -> int:
    """Serve until SIGTERM/SIGINT: in this process, or in `replicas` child processes."""
    if replicas <= 1:
        return asyncio.run(_serve_here(options))
    embedded = None
    url = nats_url_from_env()
    auth = BusAuth.from_env()
    if url is None:
        embedded = EmbeddedServer(locked=True)
        url = embedded.start()
        auth = embedded.credentials("worker")
        print(
            f"no NATS_URL set: started nats-server at {url} "
            f"(a runner connects with NATS_NKEY={embedded.credentials('runner').nkey})",
            flush=True,
        )
    try:
        return _supervise(options, replicas, url, auth)
    finally:
        if embedded is not None:
            embedded.stop()


async def _serve_here(options: ServeOptions) -> int:
    stop = asyncio.Event()
    _install_stop(stop)
    # A file or module path stands for the functions it defines (loaded here, in this process).
    options = replace(options, functions=tuple(function_names(options.functions)))
    await serve_functions(options, nats_url_from_env(), stop)
    return 0


def _supervise(options: ServeOptions, replicas: int, url: str, auth: BusAuth) -> int:
    """`replicas` worker processes, supervised (`WorkerProcesses`: one that dies is
    replaced), until SIGTERM or Ctrl-C; 1 if they kept exiting as they started."""
    return asyncio.run(_supervised(WorkerProcesses(options, url, None, replicas, auth)))


async def _supervised(group: WorkerProcesses) -> int:
    stop = asyncio.Event()
    _install_stop(stop)
    group.start()
    supervising = asyncio.create_task(group.supervise())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([supervising, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    await asyncio.to_thread(group.stop, group.timeouts.drain)
    supervising.cancel()
    if group.failed:
        log.error("%s", group.failed)
        return 1
    return 0
