"""Keeping one vLLM server's LoRA adapters in step with a policy under training: the loop of
`gym-runner sync-adapters`, which runs beside each inference server (it writes adapter
files to the server's own disk, so no filesystem is shared with the trainer).

Every `Timeouts.adapter_report` seconds, and at once when a policy record changes, the
syncer reconciles: the server should hold exactly the adapters the newest record of its
policy name lists (`PolicyRecord.adapters`). Missing ones are fetched from the object
store (chunked, SHA-256 checked, and compared with the record's digest), written to a
directory of their own and loaded; adapters of the policy name the record no longer lists
(older versions, an earlier incarnation's) are unloaded, their files deleted a little
later (vLLM reads an adapter's files lazily). Then it reports what the server holds
(`AdapterServerReport`). So a server started mid-run, or restarted (it comes back empty),
catches up to the current versions within a report period, and an adapter that failed to
load is tried again every `Timeouts.adapter_missing` seconds.
"""

from __future__ import annotations

import asyncio
import io
import logging
import shutil
import tarfile
import time
import uuid
from pathlib import Path

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from gymbus.functions.models.vllm_admin import AdapterRefused, ServerLimits, ServerUnreachable, VllmAdmin
from gymbus.schemas import (
    DEFAULT_TIMEOUTS,
    AdapterServerReport,
    PolicyAdapter,
    PolicyRecord,
    Timeouts,
    adapter_pattern,
    redact_url,
)

from ..cluster import Connection
from ..wire import encode
from ._follow import KeyFollower
from ._policy import ADAPTER_FILES, adapter_reports, adapter_store, policy_records

__all__ = ["AdapterSyncer", "sync_adapters"]

log = logging.getLogger("gymbus.adapters")

_FILES_KEPT = 10.0
"""Seconds an unloaded adapter's files stay on disk (a request may still be reading them)."""


class AdapterSyncer:
    """Keeps the server at `server` holding the adapters of the policies named `name`,
    with their files under `directory`. Make it with `start`; `run` until `stop` is set."""

    def __init__(
        self,
        server: str,
        name: str,
        directory: Path,
        records: KeyFollower[PolicyRecord],
        store: ObjectStore,
        reports: KeyValue,
        timeouts: Timeouts,
    ) -> None:
        self.admin = VllmAdmin(server, timeouts.adapter_http)
        self.name = name
        self.directory = directory
        self.records = records
        self.store = store
        self.reports = reports
        self.timeouts = timeouts
        self.key = f"{name}.{uuid.uuid4().hex[:12]}"
        self.pattern = adapter_pattern(name)
        self.failed: dict[str, tuple[str, float]] = {}
        """Adapters that would not load: name → (why, when to try again)."""
        self.unloaded: dict[str, float] = {}
        self.limits: ServerLimits | None = None
        self.wake = asyncio.Event()

    @classmethod
    async def start(
        cls, conn: Connection, server: str, name: str, directory: Path, timeouts: Timeouts = DEFAULT_TIMEOUTS
    ) -> AdapterSyncer:
        syncer: AdapterSyncer
        records = KeyFollower(
            await policy_records(conn), PolicyRecord, f"{name}.*", lambda key: syncer.wake.set()
        )
        syncer = cls(
            server,
            name,
            directory,
            records,
            await adapter_store(conn),
            await adapter_reports(conn, timeouts),
            timeouts,
        )
        directory.mkdir(parents=True, exist_ok=True)
        await records.start(timeouts.connect)
        return syncer

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile until `stop` is set; then withdraw this server's report."""
        try:
            while not stop.is_set():
                self.wake.clear()
                await self.reconcile()
                await _first(stop, self.wake, self.timeouts.adapter_report)
        finally:
            await self.records.stop()
            await self.admin.aclose()
            try:
                await self.reports.delete(self.key)
            except (nats.errors.Error, TimeoutError):
                pass  # it expires with the bucket's TTL

    async def reconcile(self) -> AdapterServerReport:
        """One round: load what is missing, unload what is no longer wanted, report."""
        try:
            held = set(await self.admin.adapters())
            if self.limits is None:
                self.limits = await self.admin.limits()
        except ServerUnreachable as exc:
            if self.limits is not None:
                log.warning("server %s is down: %s", self.admin.where, exc)
            self.limits = None  # a restarted server may come back with other limits
            return await self._report(False, set())
        wanted = self._wanted()
        for adapter in wanted:
            if adapter.name not in held and await self._load(adapter):
                held.add(adapter.name)
        names = {adapter.name for adapter in wanted}
        self.failed = {name: failure for name, failure in self.failed.items() if name in names}
        for name in sorted(one for one in held if self.pattern.match(one) and one not in names):
            if await self._unload(name):
                held.discard(name)
        self._delete_old_files(names)
        return await self._report(True, held)

    def _wanted(self) -> list[PolicyAdapter]:
        """The adapters of the newest record of this policy name (an earlier incarnation's
        record, if still there, is not served)."""
        records = sorted(self.records.values.values(), key=lambda record: record.updated)
        return list(records[-1].adapters) if records else []

    async def _load(self, adapter: PolicyAdapter) -> bool:
        why, retry_at = self.failed.get(adapter.name, ("", 0.0))
        if time.monotonic() < retry_at:
            return False
        try:
            path = await self._files(adapter)
            await self.admin.load(adapter.name, str(path))
        except (AdapterRefused, ServerUnreachable, _BadObject, OSError) as exc:
            self.failed[adapter.name] = (str(exc), time.monotonic() + self.timeouts.adapter_missing)
            log.warning("adapter %s did not load on %s: %s", adapter.name, self.admin.where, exc)
            return False
        self.failed.pop(adapter.name, None)
        log.info("loaded adapter %s on %s", adapter.name, self.admin.where)
        return True

    async def _files(self, adapter: PolicyAdapter) -> Path:
        """The adapter's directory on this machine, fetched from the store if not there yet."""
        target = self.directory / adapter.name
        if (target / "adapter_config.json").exists():
            return target
        try:
            found = await self.store.get(adapter.object)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
            raise _BadObject(
                f"adapter {adapter.name} could not be fetched: {type(exc).__name__}: {exc}"
            ) from None
        if found.info.digest != adapter.digest:
            raise _BadObject(
                f"adapter {adapter.name}'s object is not the one its record names (digest differs)"
            )
        scratch = self.directory / f".{adapter.name}.{uuid.uuid4().hex[:8]}"
        try:
            _unpack(found.data or b"", scratch, adapter.name)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return target

    async def _unload(self, name: str) -> bool:
        try:
            await self.admin.unload(name)
        except (AdapterRefused, ServerUnreachable) as exc:
            log.warning("could not unload adapter %s from %s: %s", name, self.admin.where, exc)
            return False
        self.unloaded[name] = time.monotonic()
        return True

    def _delete_old_files(self, wanted: set[str]) -> None:
        now = time.monotonic()
        for name, since in list(self.unloaded.items()):
            if name in wanted:
                self.unloaded.pop(name)
            elif now - since >= _FILES_KEPT:
                shutil.rmtree(self.directory / name, ignore_errors=True)
                self.unloaded.pop(name)

    async def _report(self, healthy: bool, held: set[str]) -> AdapterServerReport:
        limits = self.limits or ServerLimits(None, None, None)
        report = AdapterServerReport(
            name=self.name,
            server=redact_url(self.admin.root),
            healthy=healthy,
            loaded=sorted(one for one in held if self.pattern.match(one)),
            failed={name: why for name, (why, _) in self.failed.items() if name not in held},
            max_lora_rank=limits.max_lora_rank,
            max_loras=limits.max_loras,
            max_model_len=limits.max_model_len,
            at=time.time(),
        )
        try:
            await self.reports.put(self.key, encode(report))
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not report %s's adapters: %s", self.admin.where, type(exc).__name__)
        return report


class _BadObject(Exception):
    """An adapter's object is missing, is not the recorded one, or is not an adapter."""


def _unpack(data: bytes, target: Path, name: str) -> None:
    """Write the adapter files of a tar (only those, only regular files) into `target`."""
    target.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.name not in ADAPTER_FILES:
                    raise _BadObject(f"adapter {name}'s object holds {member.name!r}, not an adapter file")
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                (target / member.name).write_bytes(source.read())
    except tarfile.TarError as exc:
        raise _BadObject(f"adapter {name}'s object is not a tar of adapter files: {exc}") from None
    if not (target / "adapter_config.json").exists():
        raise _BadObject(f"adapter {name}'s object has no adapter_config.json")


async def _first(stop: asyncio.Event, wake: asyncio.Event, timeout: float) -> None:
    """Until `stop` or `wake` is set, or `timeout` seconds have passed."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def sync_adapters(
    url: str,
    server: str,
    name: str,
    directory: Path,
    stop: asyncio.Event,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> None:
    """Keep `server`'s adapters of the policies named `name` current (files under
    `directory`) until `stop` is set: `gym-runner sync-adapters`."""
    from ..connection import open_bus  # the connection module imports the embedded server

    async with open_bus(
        url, name=f"gym-sync-adapters:{redact_url(server)}", timeouts=timeouts, role="adapters"
    ) as bus:
        syncer = await AdapterSyncer.start(bus.conn, server, name, directory, timeouts)
        first = await syncer.reconcile()
        state = "up" if first.healthy else "not answering yet"
        print(f"ready: syncing adapters of policy {name} into {redact_url(server)} ({state})", flush=True)
        await syncer.run(stop)
