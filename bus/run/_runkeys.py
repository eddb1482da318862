"""A secret per run, so a runner accepts only results of tasks it published itself.

The runner signs each task: header `Gym-Token` = HMAC(run key, `<run>.<seq>.<attempt>`).
An agent copies the token onto the result; the runner recomputes it and drops a result
whose token does not match (a forger who cannot read the task cannot make one). The
key is kept in the KV bucket `gym_runs` (only runners may read it), so a `--resume`
of the same run, in another process, still accepts the results its predecessor's
tasks produce.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import nats.js.errors

from gymbus.schemas import RESULTS_MAX_AGE, task_id

from ..cluster import Connection, open_key_value, retry_while_forming
from ..wire import RUNS_BUCKET

__all__ = ["run_key", "task_token", "token_matches"]


async def run_key(conn: Connection, run_id: str, *, fresh: bool) -> bytes:
    """The secret key of `run`: a new one if `fresh` (or none is stored), else the stored one."""
    kv = await open_key_value(conn, RUNS_BUCKET, RESULTS_MAX_AGE)
    if not fresh:
        try:
            entry = await retry_while_forming(conn, lambda: kv.get(run_id))
            if entry.value:
                return entry.value
        except nats.js.errors.KeyNotFoundError:
            pass
    key = secrets.token_bytes(32)
    await retry_while_forming(conn, lambda: kv.put(run_id, key))
    return key


def task_token(key: bytes, run_id: str, seq: int, attempt: int) -> str:
    """The token of task `seq` (attempt `attempt`) of `run`: 128 bits of HMAC-SHA256."""
    message = task_id(run_id, seq, attempt).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:32]


def token_matches(key: bytes, run_id: str, seq: int, attempt: int, token: str) -> bool:
    return hmac.compare_digest(task_token(key, run_id, seq, attempt), token)
