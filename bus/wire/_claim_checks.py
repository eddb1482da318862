"""Claim checks: a body too big for one NATS message waits, addressed, in one bounded stream.

The sender stores the body in the stream GYM_CLAIMS, in chunks of `Limits.claim_chunk_bytes`,
one message per subject

    gym.claims.<receiver>.<sender>.<id>.<chunk index>

and sends an empty message with the header `Gym-Claim: <gym.claims.<receiver>.<sender>.<id>>;<chunks>;<sha256>`
(the digest is unpadded base64url). The receiver reads each chunk by a direct get of the
last message on its subject and checks the digest. Who is who:

- **sender**: the writer's own identity, its reply inbox's token (`bus.security._auth.inbox_prefix_for`:
  its nkey's public key, or its user name). nats-server lets each role publish only on
  `gym.claims.*.<its identity>.>`, so a receiver knows who wrote a body.
- **receiver**: the role that serves the subject the message goes to (`env-<env>`,
  `model-<model>`, `agent-<agent>` for its requests and its tasks, `runner` for results), or
  for a reply the requester's identity (`bus.wire._subjects.receiver_of`). Each role may read
  (`$JS.API.DIRECT.GET.GYM_CLAIMS.gym.claims.<receiver>.>`) only what is addressed to its
  role name or its identity.

So a role writes only its own bodies and reads only those addressed to it, and nothing but
those permissions is needed: no consumer, no read by sequence, no purge. Nobody but an
operator (the `admin` role) may purge or delete the stream or its messages.

Lifetimes. Every chunk carries its own TTL (`Nats-TTL`): a request's body lives its call's
timeout plus `Timeouts.late_reply`, a reply's `late_reply`, a task's until its rollout's
deadline plus `late_reply`, a result's `RESULTS_MAX_AGE`; the stream's `max_age` is the
backstop. A reader that is done with a body releases it at once (`release_claim`): it publishes
an empty one-second message on each chunk's subject, which replaces the chunk (one message
per subject) and then expires. Requests and replies are released as they are read; a task
once its agent acknowledged it, a result once its runner wrote it (JetStream may deliver
both again until then).

Bound. The stream holds at most `Limits.claim_store_bytes` and refuses new chunks beyond it
(discard new). The sender gets `ClaimStoreFull` (transient: bodies leave as they are read)
and its partial chunks are released; nothing already stored is dropped to make room, so a
full store delays or fails a call visibly and never loses a rollout. Callers retry it as
they retry any transient error; the run protocol retries tasks and results for minutes
(`CLAIM_STORE_RETRY`). A role can fill the store up to its bound (with bodies its own key
signs, until they expire); it cannot exceed it, read others' bodies, or purge.

Why not JetStream's object store (what GymBus used before): its subjects carry a random
chunk id and the object name in base64, so permissions cannot tell one sender's or
receiver's objects from another's; reading an object needs a consumer (whose deliver
subject nats-server does not check against its creator's permissions, so any reader could
copy the bucket onto any subject), replacing or deleting one needs the stream's purge, and
its reads run at about 15 MiB/s against about 190 MiB/s for direct gets of 128 KiB chunks.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import uuid
from collections.abc import Mapping

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from gymbus.schemas import (
    CLAIM,
    CLAIM_STORE_RETRY,
    DEFAULT_LIMITS,
    RESULTS_MAX_AGE,
    BusUnavailable,
    ClaimStoreFull,
    GymError,
    PayloadTooLarge,
)

from ..cluster import Connection, retry_while_forming
from . import _subjects as subjects
from ._retry import retrying

__all__ = [
    "CLAIM",
    "check_in",
    "check_in_when_room",
    "check_out",
    "claim_store_config",
    "ensure_claim_store",
    "needs_claim",
    "release_claim",
]

log = logging.getLogger("gymbus.bus")

_HEADROOM = 64 * 1024  # room for headers and protocol overhead under max_payload
_NO_SPACE = 10077  # JetStream: maximum bytes exceeded (also: insufficient resources)
_EXISTS = 10058  # JetStream: stream name already in use with a different configuration
_READ_TRIES = 4  # a direct get served by a replica that has not caught up yet says 404
_RELEASED_TTL = 1  # seconds an empty release marker lives (JetStream's shortest TTL)
_ANONYMOUS = "anonymous"  # the sender token of a connection with no identity (an open bus)


def needs_claim(conn: Connection, data: bytes) -> bool:
    """Whether `data` is too big to send as one message on `conn`."""
    return len(data) > conn.client.max_payload - _HEADROOM


def claim_store_config(max_bytes: int = DEFAULT_LIMITS.claim_store_bytes, replicas: int = 1) -> StreamConfig:
    """The claim store's configuration (see the module docstring)."""
    return StreamConfig(
        name=subjects.CLAIMS_STREAM,
        subjects=[subjects.claims_all()],
        retention=RetentionPolicy.LIMITS,
        max_bytes=max_bytes,
        discard=DiscardPolicy.NEW,
        max_age=RESULTS_MAX_AGE,
        max_msgs_per_subject=1,
        storage=StorageType.FILE,
        num_replicas=replicas,
        allow_direct=True,
        allow_msg_ttl=True,
    )


async def ensure_claim_store(conn: Connection, max_bytes: int = DEFAULT_LIMITS.claim_store_bytes) -> None:
    """Create the claim store, or check that the one there is bounded as it must be (an
    operator may have made it with another bound; any bound will do). `BusUnavailable`
    saying what is wrong with an existing one; a role that may not create it times out."""
    config = claim_store_config(max_bytes, conn.replicas)
    try:
        await retry_while_forming(conn, lambda: conn.js.add_stream(config))
    except nats.js.errors.APIError as exc:
        if exc.err_code != _EXISTS:
            raise BusUnavailable(
                f"the claim store {subjects.CLAIMS_STREAM} ({max_bytes} bytes) could not be created: "
                f"{exc.description}"
            ) from None
        existing = (await conn.js.stream_info(subjects.CLAIMS_STREAM)).config
        problem = _unsafe(existing)
        if problem:
            raise BusUnavailable(
                f"the claim store {subjects.CLAIMS_STREAM} exists but {problem}: an operator must "
                "delete it (nats stream rm GYM_CLAIMS), and a runner makes it again"
            ) from None


def _unsafe(config: StreamConfig) -> str | None:
    if not config.max_bytes or config.max_bytes < 0:
        return "is unbounded (no max_bytes)"
    if config.discard != DiscardPolicy.NEW:
        return "drops old bodies when full (discard old)"
    if config.subjects != [subjects.claims_all()]:
        return f"has the subjects {config.subjects}, not {subjects.claims_all()}"
    if not (config.allow_direct and config.allow_msg_ttl and config.max_msgs_per_subject == 1):
        return "lacks direct gets, message TTLs or one message per subject"
    return None


def _sender(conn: Connection) -> str:
    return subjects.identity_of_inbox(conn.client.new_inbox()) or _ANONYMOUS


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


async def check_in(
    conn: Connection, subject: str, data: bytes, headers: Mapping[str, str] | None, *, ttl: float
) -> tuple[bytes, dict[str, str]]:
    """An empty body and headers with a claim for `data`, which is stored first, addressed to
    whoever reads `subject`, for `ttl` seconds. `ClaimStoreFull` if the store is at its bound,
    `BusUnavailable` if the bus did not answer (both transient), `PayloadTooLarge` if the
    store refused it otherwise or is missing and cannot be made."""
    prefix = subjects.claim_prefix(subjects.receiver_of(subject), _sender(conn), uuid.uuid4().hex)
    chunk = DEFAULT_LIMITS.claim_chunk_bytes
    count = max(1, -(-len(data) // chunk))
    try:
        await _store(conn, prefix, data, chunk, count, ttl)
    except GymError:
        await _release(conn, prefix, count)  # the chunks that did fit: no one will read them
        raise
    return b"", {**(headers or {}), CLAIM: f"{prefix};{count};{_digest(data)}"}


async def check_in_when_room(
    conn: Connection, subject: str, data: bytes, headers: Mapping[str, str] | None, *, ttl: float
) -> tuple[bytes, dict[str, str]]:
    """`check_in`, tried again while the store is full or the bus away (`CLAIM_STORE_RETRY`,
    minutes): for tasks and results, which are worth the wait, as bodies leave the store
    when read."""

    def waiting(exc: GymError) -> None:
        log.warning("%s; trying again", exc)

    return await retrying(
        lambda: check_in(conn, subject, data, headers, ttl=ttl),
        CLAIM_STORE_RETRY,
        should_retry=lambda exc: exc.transient,
        on_retry=waiting,
    )


async def _store(
    conn: Connection, prefix: str, data: bytes, chunk: int, count: int, ttl: float, *, create: bool = True
) -> None:
    ttl = max(float(_RELEASED_TTL), ttl)
    for index in range(count):
        part = data[index * chunk : (index + 1) * chunk]
        try:
            await conn.js.publish(subjects.claim_chunk(prefix, index), part, msg_ttl=ttl)
        except nats.js.errors.NoStreamResponseError:
            if index or not create:
                raise PayloadTooLarge(
                    f"{len(data)} bytes could not be stored: the claim store is gone"
                ) from None
            await _create(conn)  # the first body on this bus
            await _store(conn, prefix, data, chunk, count, ttl, create=False)
            return
        except nats.js.errors.APIError as exc:
            if exc.err_code == _NO_SPACE:
                raise ClaimStoreFull(
                    f"{len(data)} bytes could not be stored: the claim store {subjects.CLAIMS_STREAM} "
                    f"is full ({exc.description})"
                ) from None
            raise PayloadTooLarge(f"{len(data)} bytes could not be stored ({exc.description})") from None
        except (nats.errors.Error, TimeoutError) as exc:  # the bus is away (or refused this role)
            raise BusUnavailable(
                f"{len(data)} bytes could not be stored as a claim ({type(exc).__name__})"
            ) from None


async def _create(conn: Connection) -> None:
    """Make the missing store (a runner's or a worker's role may; others time out)."""
    try:
        await ensure_claim_store(conn)
    except (nats.errors.Error, TimeoutError) as exc:
        raise PayloadTooLarge(
            f"the claim store {subjects.CLAIMS_STREAM} does not exist and could not be created "
            f"({type(exc).__name__}): a runner creates it when it opens a run"
        ) from None


async def check_out(
    conn: Connection, data: bytes, headers: Mapping[str, str] | None, *, release_it: bool
) -> bytes:
    """The body a message stands for: `data` itself, or the claimed body (released at once
    with `release_it`). `PayloadTooLarge` if the claim is malformed or its body is gone or
    changed; `BusUnavailable` if the bus did not answer (or the body is not this role's to
    read: the server drops the request)."""
    claim = headers.get(CLAIM) if headers else None
    if claim is None:
        return data
    prefix, count, digest = _parse(claim)
    js = conn.js
    parts = [await _read(js, subjects.claim_chunk(prefix, index)) for index in range(count)]
    body = b"".join(parts)
    if _digest(body) != digest:
        raise PayloadTooLarge(f"claimed body {prefix} is gone or changed (its digest differs)")
    if release_it:
        await _release(conn, prefix, count)
    return body


def _parse(claim: str) -> tuple[str, int, str]:
    prefix, _, rest = claim.partition(";")
    count, _, digest = rest.partition(";")
    if not subjects.is_claim_prefix(prefix) or not count.isdigit() or not digest:
        raise PayloadTooLarge(f"malformed claim {claim[:200]!r}")
    return prefix, int(count), digest


async def _read(js: JetStreamContext, subject: str) -> bytes:
    for attempt in range(_READ_TRIES):
        try:
            return (await js.get_msg(subjects.CLAIMS_STREAM, subject=subject, direct=True)).data or b""
        except nats.js.errors.NotFoundError:
            if attempt + 1 == _READ_TRIES:
                raise PayloadTooLarge(f"claimed body chunk {subject} is gone (expired or released)") from None
            await asyncio.sleep(0.05 * 2**attempt)
        except (nats.errors.Error, TimeoutError) as exc:  # the bus is away (or refused this role)
            raise BusUnavailable(
                f"claimed body chunk {subject} could not be read ({type(exc).__name__})"
            ) from None
    raise AssertionError("unreachable")


async def release_claim(conn: Connection, headers: Mapping[str, str] | None) -> None:
    """Free the claimed body `headers` name, if any, now that its reader is done with it
    (best effort: it expires with its TTL anyway)."""
    claim = headers.get(CLAIM) if headers else None
    if claim is None:
        return
    try:
        prefix, count, _ = _parse(claim)
    except PayloadTooLarge:
        return
    await _release(conn, prefix, count)


async def _release(conn: Connection, prefix: str, count: int) -> None:
    marker = {"Nats-TTL": str(_RELEASED_TTL)}
    try:
        for index in range(count):
            await conn.client.publish(subjects.claim_chunk(prefix, index), b"", headers=marker)
    except nats.errors.Error as exc:
        log.debug("claimed body %s not released (%s): it expires", prefix, type(exc).__name__)
