"""Claim checks: a body too big for one NATS message travels through the object store.

The sender puts the body in the `gym_claims` object store and sends an empty message
with the header `Gym-Claim: <object name>`; the receiver fetches the body by that name.
Request and reply bodies are deleted once read; task and result bodies (which JetStream
may deliver again) are left to expire with the bucket's TTL. Objects in the store move
at tens of MB/s, so this is for the rare long rollout, not the common case.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Mapping

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.object_store import ObjectStore

from gymbus.schemas import CLAIM, RESULTS_MAX_AGE, PayloadTooLarge

from ._replicas import replicas_of
from ._forming import retry_while_forming

__all__ = ["CLAIM", "CLAIMS_BUCKET", "check_in", "check_out", "needs_claim"]

CLAIMS_BUCKET = "gym_claims"
_HEADROOM = 64 * 1024  # room for headers and protocol overhead under max_payload

_stores: weakref.WeakKeyDictionary[Client, ObjectStore] = weakref.WeakKeyDictionary()


def needs_claim(nc: Client, data: bytes) -> bool:
    """Whether `data` is too big to send as one message on `nc`."""
    return len(data) > nc.max_payload - _HEADROOM


async def _store(nc: Client) -> ObjectStore:
    store = _stores.get(nc)
    if store is None:
        js = nc.jetstream()
        store = _stores[nc] = await retry_while_forming(js, lambda: _open_or_create(js, replicas_of(nc)))
    return store


async def _open_or_create(js: JetStreamContext, replicas: int) -> ObjectStore:
    try:
        return await js.object_store(CLAIMS_BUCKET)
    except nats.js.errors.BucketNotFoundError:
        config = ObjectStoreConfig(ttl=RESULTS_MAX_AGE, storage=StorageType.FILE, replicas=replicas)
        return await js.create_object_store(CLAIMS_BUCKET, config=config)


async def check_in(
    nc: Client, data: bytes, headers: Mapping[str, str] | None
) -> tuple[bytes, dict[str, str]]:
    """An empty body and headers with a claim for `data`, which is stored first."""
    name = uuid.uuid4().hex
    try:
        await (await _store(nc)).put(name, data)
    except (nats.errors.Error, TimeoutError) as exc:
        raise PayloadTooLarge(
            f"{len(data)} bytes could not be stored as a claim ({type(exc).__name__})"
        ) from None
    return b"", {**(headers or {}), CLAIM: name}


async def check_out(nc: Client, data: bytes, headers: Mapping[str, str] | None, *, delete: bool) -> bytes:
    """The body a message stands for: `data` itself, or the claimed object."""
    name = headers.get(CLAIM) if headers else None
    if name is None:
        return data
    store = await _store(nc)
    try:
        body = (await store.get(name)).data or b""
    except (nats.errors.Error, TimeoutError) as exc:
        raise PayloadTooLarge(f"claimed body {name} could not be read ({type(exc).__name__})") from None
    if delete:
        try:
            await store.delete(name)
        except (nats.errors.Error, TimeoutError):
            pass  # it expires with the bucket's TTL
    return body
