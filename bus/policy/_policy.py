"""Policy versions on the bus: where a trainer's LoRA adapters are kept, which version each
policy is at, and what each inference server holds (`schemas._policy` has the records).

    gym_policies          KV: policy key → `PolicyRecord` (the trainer's side writes it)
    gym_adapter_servers   KV: `<name>.<server>` → `AdapterServerReport` (each syncer writes its own)
    gym_adapters          object store: one object per version, a tar of the adapter's files,
                          chunked and SHA-256 checked by the store

`PolicyVersions` is what a model worker keeps: the current version of every policy.
`PolicyPublisher` is the trainer's side: it stores a new version, asks every server for it,
waits until their syncers report it loaded, and only then makes it current, so no model
call names a version before some server holds it. A server that fails to load it (or
does not report in time) is named in a warning and gets no calls naming the new
version until it catches up (the `vllm` function skips a server that lacks the adapter);
if none loads it, the publish fails naming every server and why.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    RESULTS_MAX_AGE,
    AdapterServerReport,
    Limits,
    PayloadTooLarge,
    PolicyAdapter,
    PolicyRecord,
    Timeouts,
    UpstreamFailed,
    adapter_name,
    policy_name_of,
)

from ..cluster import Connection, open_key_value, retry_while_forming
from ..wire import ADAPTER_SERVERS_BUCKET, ADAPTERS_BUCKET, POLICIES_BUCKET, encode
from ._follow import KeyFollower

if TYPE_CHECKING:
    from ..connection import Bus

__all__ = [
    "PolicyPublisher",
    "PolicyVersions",
    "Published",
    "adapter_files",
    "adapter_reports",
    "adapter_store",
    "live_reports",
    "policy_records",
]

log = logging.getLogger("gymbus.policy")

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
"""The files of a PEFT adapter directory that travel (vLLM reads these)."""


async def policy_records(conn: Connection) -> KeyValue:
    return await open_key_value(conn, POLICIES_BUCKET, RESULTS_MAX_AGE)


async def adapter_reports(conn: Connection, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> KeyValue:
    return await open_key_value(conn, ADAPTER_SERVERS_BUCKET, timeouts.adapter_report_ttl)


async def adapter_store(conn: Connection) -> ObjectStore:
    js = conn.js

    async def open_or_create() -> ObjectStore:
        try:
            return await js.object_store(ADAPTERS_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            config = ObjectStoreConfig(ttl=RESULTS_MAX_AGE, storage=StorageType.FILE, replicas=conn.replicas)
            return await js.create_object_store(ADAPTERS_BUCKET, config=config)

    return await retry_while_forming(conn, open_or_create)


def live_reports(
    reports: Mapping[str, AdapterServerReport], name: str, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> list[AdapterServerReport]:
    """The reports of policy `name`'s servers whose syncers reported recently."""
    oldest = time.time() - timeouts.adapter_report_ttl
    return sorted(
        (report for report in reports.values() if report.name == name and report.at >= oldest),
        key=lambda report: report.server,
    )


def adapter_files(files: Mapping[str, bytes]) -> bytes:
    """The files of an adapter directory as one tar (no compression: weights do not shrink)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class PolicyVersions:
    """The current version of every policy on the bus (`version(policy)`), for a model
    worker; kept current by a watch of `gym_policies`."""

    def __init__(self, follower: KeyFollower[PolicyRecord]) -> None:
        self.follower = follower

    @classmethod
    async def start(cls, conn: Connection, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> PolicyVersions:
        follower = KeyFollower(await policy_records(conn), PolicyRecord)
        await follower.start(timeouts.connect)
        return cls(follower)

    def version(self, policy: str) -> tuple[str, int] | None:
        """The adapter model calls of `policy` name now, and its version; `None` before its first."""
        record = self.follower.values.get(policy)
        if record is None or record.current <= 0:
            return None
        for adapter in record.adapters:
            if adapter.version == record.current:
                return adapter.name, adapter.version
        return adapter_name(policy, record.incarnation, record.current), record.current

    async def aclose(self) -> None:
        await self.follower.stop()


@dataclass(frozen=True)
class Published:
    """How a new version reached the servers: who loaded it, and who did not (and why)."""

    version: int
    loaded: list[str]
    missing: dict[str, str]


class PolicyPublisher:
    """Trainer process `incarnation`'s side of a policy (`policy`, a key `<name>.<run>`).
    Make it with `open`; `publish` each new adapter, `retire` old ones, `close` at the end.

    Versions continue from those the policy already has (`base`): a trainer resumed from a
    checkpoint publishes after its predecessor's, so every version of a policy compares."""

    def __init__(
        self,
        js: JetStreamContext,
        policy: str,
        incarnation: str,
        records: KeyValue,
        store: ObjectStore,
        reports: KeyFollower[AdapterServerReport],
        timeouts: Timeouts,
        limits: Limits,
    ) -> None:
        self.js = js
        self.policy = policy
        self.name = policy_name_of(policy)
        self.records = records
        self.store = store
        self.reports = reports
        self.timeouts = timeouts
        self.limits = limits
        self.incarnation = incarnation
        self.record = PolicyRecord(policy=policy, incarnation=incarnation)
        self.base = 0
        """The newest version the policy had before this process published."""
        self.changed = asyncio.Event()

    @classmethod
    async def open(
        cls,
        bus: Bus,
        policy: str,
        incarnation: str,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        limits: Limits = DEFAULT_LIMITS,
    ) -> PolicyPublisher:
        js = bus.conn.js
        records, store = await policy_records(bus.conn), await adapter_store(bus.conn)
        publisher: PolicyPublisher
        reports = KeyFollower(
            await adapter_reports(bus.conn, timeouts),
            AdapterServerReport,
            on_change=lambda key: publisher.changed.set(),
        )
        publisher = cls(js, policy, incarnation, records, store, reports, timeouts, limits)
        await reports.start(timeouts.connect)
        await publisher._continue()
        return publisher

    async def _continue(self) -> None:
        """Take over the policy's record, if it has one: its versions stay served until
        this process publishes its first."""
        try:
            entry = await self.records.get(self.policy)
        except nats.js.errors.KeyNotFoundError:
            entry = None
        if entry is not None and entry.value:
            earlier = msgspec.json.decode(entry.value, type=PolicyRecord)
            self.base = max([earlier.current, *(one.version for one in earlier.adapters)])
            self.record = msgspec.structs.replace(earlier, incarnation=self.incarnation)
        await self._write()

    def servers(self) -> list[AdapterServerReport]:
        """The live servers of this policy's name, as their syncers last reported."""
        return live_reports(self.reports.values, self.name, self.timeouts)

    async def publish(self, version: int, files: Mapping[str, bytes], rank: int) -> Published:
        """Store `files` (an adapter directory's `ADAPTER_FILES`) as `version`, have every
        server load it, and make it current. `UpstreamFailed` naming each server if none
        loaded it; `ValueError` for files a server would refuse."""
        name = adapter_name(self.policy, self.incarnation, version)
        others_files = sorted(set(files) - set(ADAPTER_FILES))
        if others_files or "adapter_config.json" not in files:
            raise ValueError(f"adapter {name}: {', '.join(ADAPTER_FILES)} only, with adapter_config.json; "
                             f"got {', '.join(sorted(files))}")  # fmt: skip
        data = adapter_files(files)
        if len(data) > self.limits.adapter_bytes:
            raise PayloadTooLarge(f"adapter {name} is {len(data)} bytes, over Limits.adapter_bytes")
        info = await self.store.put(name, data)
        adapter = PolicyAdapter(
            version=version, name=name, object=name, digest=info.digest or "", size=len(data)
        )
        # An earlier process's versions go with this one's first (none of them is newer).
        others = [one for one in self.record.adapters if self.base < one.version != version]
        self.record = msgspec.structs.replace(self.record, adapters=[*others, adapter], rank=rank)
        await self._write()
        loaded, missing = await self._wait_loaded(name)
        if not loaded:
            self.record = msgspec.structs.replace(self.record, adapters=others)  # no server tries again
            await self._write()
            why = (
                "; ".join(f"{server}: {reason}" for server, reason in missing.items()) or "no server is live"
            )
            raise UpstreamFailed(f"no inference server of policy {self.name} loaded adapter {name}: {why}")
        for server, reason in missing.items():
            log.warning("server %s did not load adapter %s (%s): it serves no calls naming it until it "
                        "catches up", server, name, reason)  # fmt: skip
        self.record = msgspec.structs.replace(self.record, current=version)
        await self._write()
        return Published(version, loaded, missing)

    async def _wait_loaded(self, name: str) -> tuple[list[str], dict[str, str]]:
        deadline = time.monotonic() + self.timeouts.adapter_load
        while True:
            self.changed.clear()
            loaded, missing, pending = _outcome(self.servers(), name)
            if not pending:
                return loaded, missing
            left = deadline - time.monotonic()
            if left <= 0:
                late = f"did not report it loaded within {self.timeouts.adapter_load:.0f} s"
                return loaded, {**missing, **dict.fromkeys(pending, late)}
            try:
                async with asyncio.timeout(min(left, self.timeouts.adapter_report)):
                    await self.changed.wait()
            except TimeoutError:
                pass  # reports expire without a change: look again

    async def retire(self, version: int) -> None:
        """Servers unload `version` (its object goes one version later: a server may still
        be fetching it)."""
        kept = [one for one in self.record.adapters if one.version != version]
        if len(kept) == len(self.record.adapters):
            return
        self.record = msgspec.structs.replace(self.record, adapters=kept)
        await self._write()
        if all(one.version != version - 1 for one in kept):
            await self._delete_object(adapter_name(self.policy, self.incarnation, version - 1))

    async def close(self, *, forget: bool) -> None:
        """Stop following the servers; `forget` also deletes the policy's record (servers
        then unload its adapters) and its objects."""
        await self.reports.stop()
        if not forget:
            return
        try:
            await self.records.delete(self.policy)
        except (nats.errors.Error, TimeoutError) as exc:
            log.debug("could not delete policy %s: %s", self.policy, type(exc).__name__)
        for adapter in self.record.adapters:
            await self._delete_object(adapter.object)

    async def _write(self) -> None:
        self.record = msgspec.structs.replace(self.record, updated=time.time())
        await self.records.put(self.policy, encode(self.record))

    async def _delete_object(self, name: str) -> None:
        try:
            await self.store.delete(name)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            pass  # never stored, or already gone; the bucket's TTL is the backstop


def _outcome(reports: list[AdapterServerReport], name: str) -> tuple[list[str], dict[str, str], list[str]]:
    """Of the live servers: which hold `name`, which cannot (and why), which are pending."""
    loaded, missing, pending = [], {}, []
    for report in reports:
        if name in report.loaded:
            loaded.append(report.server)
        elif name in report.failed:
            missing[report.server] = report.failed[name]
        elif not report.healthy:
            missing[report.server] = "the server does not answer its syncer"
        else:
            pending.append(report.server)
    return loaded, missing, pending
