"""Following a JetStream KV bucket: the latest value of each key, kept current by a watch.

The policy records (`_policy`) and the adapter servers' reports are small and change a few
times a second at most, so every process that needs them keeps them all in memory and
reads them without a round trip; a watch (an ordered consumer) brings each change in
milliseconds and, after a reconnect, starts again from the last value of every key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec
import nats.errors
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

__all__ = ["KeyFollower"]

log = logging.getLogger("gymbus.bus")

S = TypeVar("S", bound=msgspec.Struct)


class KeyFollower(Generic[S]):
    """`values`: the latest value of every key of `kv` matching `keys`, decoded as `kind`
    (a value that does not decode is skipped, and logged). `on_change(key)` is called after
    each change, a deleted key too. `start` returns once the current values are in."""

    def __init__(
        self, kv: KeyValue, kind: type[S], keys: str = ">", on_change: Callable[[str], None] | None = None
    ) -> None:
        self.kv = kv
        self.keys = keys
        self.decoder = msgspec.json.Decoder(kind)
        self.on_change = on_change
        self.values: dict[str, S] = {}
        self.ready = asyncio.Event()
        self.watcher: KeyValue.KeyWatcher | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self, timeout: float) -> None:
        self.watcher = await self.kv.watch(self.keys)
        self.task = asyncio.create_task(self._follow(self.watcher), name=f"follow {self.keys}")
        async with asyncio.timeout(timeout):
            await self.ready.wait()

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        async for entry in watcher:
            if entry is None:  # the current values are all in
                self.ready.set()
                continue
            if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                self.values.pop(entry.key, None)
            else:
                try:
                    self.values[entry.key] = self.decoder.decode(entry.value)
                except msgspec.DecodeError as exc:
                    log.warning("skipped the value of %s in %s: %s", entry.key, self.kv._name, exc)
                    continue
            if self.on_change is not None:
                self.on_change(entry.key)

    async def stop(self) -> None:
        if self.watcher is not None:
            try:
                await self.watcher.stop()
            except nats.errors.Error:
                pass  # the connection is gone: so is the subscription
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
