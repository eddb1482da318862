"""`gym-runner sync-adapters`: the process beside a vLLM server that keeps its LoRA adapters
in step with a policy under training (`bus.AdapterSyncer` does the work)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from pathlib import Path

from gymbus.bus import subjects
from gymbus.bus import sync_adapters as run_syncer

__all__ = ["sync_adapters"]


def sync_adapters(url: str, server: str, policy: str, directory: Path | None) -> int:
    """Sync until SIGTERM or SIGINT; adapter files under `directory` (a temporary one,
    removed at the end, if `None`)."""
    subjects.check_name(policy, "policy name")
    scratch = directory is None
    target = Path(tempfile.mkdtemp(prefix="gymbus-adapters-")) if directory is None else directory
    try:
        asyncio.run(_run(url, server, policy, target))
    finally:
        if scratch:
            shutil.rmtree(target, ignore_errors=True)
    return 0


async def _run(url: str, server: str, policy: str, directory: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run_syncer(url, server, policy, directory, stop)
