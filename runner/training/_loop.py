"""An event loop in a daemon thread, for code that TRL calls synchronously (a rollout
function, a rollout worker's methods) while the bus connection and its work live on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

_T = TypeVar("_T")


class LoopThread:
    """An event loop in a daemon thread: TRL calls the rollout function synchronously, and
    the connection lives on across its calls."""

    def __init__(self, name: str = "gymbus-rollouts") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Start `work` on the loop; its future says how it ended."""
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted (Ctrl-C): the batch stops too
            raise

    def stop(self) -> None:
        """Cancel what still runs (a closed connection's watchers end on their own only
        within a second), then stop the loop and its thread."""
        self.run(_cancel_others())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


async def _cancel_others() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
