"""Calls of a `cpu_bound` function, each in a thread with an event loop of its own.

The loop that holds a worker's connection answers the server's pings, sends the
keep-alives of every call in progress and reads every request. A call that computes in
Python on it for a few seconds stalls all of that: the server drops the connection, and
every call the worker was serving is lost with it. So such a call runs in a thread, where
Python hands the interpreter back to the loop every few milliseconds, and the loop's task
for the call only waits (its keep-alives go on).

A call's `Session` talks to the bus through the worker's connection (its state is a KV
bucket, its judges are requests), which belongs to the worker's loop: the session the
thread sees sends those coroutines to that loop and awaits their results.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from gymbus.functions import Models, Session, SessionState
from gymbus.schemas import Response, ResponsesCreateParams

__all__ = ["OffLoop", "on_loop"]

T = TypeVar("T")


class OffLoop:
    """Runs calls in threads, at most `threads` at once; the others wait their turn on the
    loop (their callers keep hearing keep-alives meanwhile).

    Few threads, shared by all the environments of a worker: Python runs one thread at a
    time, so more threads compute no faster, and each one more that computes makes the
    loop wait longer for its turn (measured: 32 computing threads starved it past the
    server's pings on a busy two-core machine; 4 did not).

    A thread is started per call and is a daemon: a call still computing when its worker
    stops does not hold the process (nothing waits for its result any more). A call whose
    waiter is cancelled (the drain ran out) runs on in its thread, unwaited."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._slots: asyncio.Semaphore | None = None

    async def run(self, call: Callable[[], Awaitable[T]], name: str = "") -> T:
        """`await call()` in a thread with its own event loop; its result or exception here."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.threads)
        loop = asyncio.get_running_loop()
        async with self._slots:
            done: asyncio.Future[T] = loop.create_future()

            def work() -> None:
                try:
                    result = asyncio.run(_awaited(call))
                except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the caller
                    error = exc  # `exc` is unbound when the block ends, maybe before the loop settles
                    _settle(loop, done, lambda: done.set_exception(error))
                else:
                    _settle(loop, done, lambda: done.set_result(result))

            threading.Thread(target=work, name=f"{name} call", daemon=True).start()
            return await done


async def _awaited(call: Callable[[], Awaitable[T]]) -> T:
    return await call()


def _settle(loop: asyncio.AbstractEventLoop, done: asyncio.Future[T], settle: Callable[[], None]) -> None:
    """Run `settle` (which sets `done`'s outcome) on `loop`, unless its waiter is gone."""

    def once() -> None:
        if not done.done():  # not cancelled
            settle()

    try:
        loop.call_soon_threadsafe(once)
    except RuntimeError:
        pass  # the worker's loop is closed: nobody waits for this call any more


async def _there(coroutine: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


class _StateOnLoop:
    """`SessionState` whose calls run on `loop`."""

    def __init__(self, state: SessionState, loop: asyncio.AbstractEventLoop) -> None:
        self.state = state
        self.loop = loop

    async def get(self, session_id: str) -> bytes | None:
        return await _there(self.state.get(session_id), self.loop)

    async def put(self, session_id: str, value: bytes) -> None:
        await _there(self.state.put(session_id, value), self.loop)


class _ModelsOnLoop:
    """`Models` whose calls run on `loop`."""

    def __init__(self, models: Models, loop: asyncio.AbstractEventLoop) -> None:
        self.models = models
        self.loop = loop

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        return await _there(self.models.generate(model, params), self.loop)


def on_loop(session: Session, loop: asyncio.AbstractEventLoop) -> Session:
    """`session` for a call running in another thread: its state and model calls run on `loop`."""
    state, models = _StateOnLoop(session.state, loop), _ModelsOnLoop(session.models, loop)
    return replace(session, state=state, models=models)
