"""The task queue's JetStream streams, their durable pull consumers (`add_pull_consumer`: an
agent's tasks, a run's results), and the consumer through which a run reads its results.

    GYM_TASKS    work queue on `gym.tasks.<agent>`: one message per rollout, published with
                 a deterministic `Nats-Msg-Id`, removed when an agent worker acks it.
    GYM_RESULTS  `gym.results.<run>`: rewarded rollout rows. A run's results leave the
                 bus once its reader has acked them (the runner has written them, the
                 front has answered them: `RunClient.ack` purges up to the consumer's ack
                 floor), so a long run's store stays the size of what is in flight. A
                 result nobody reads (a task published by hand, `gym.results.unrouted`;
                 a run whose reader is gone) is kept for `RESULTS_MAX_AGE`.

Both sides make sure the streams exist (`ensure_streams`): whichever starts first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from gymbus.schemas import DEFAULT_TIMEOUTS, RESULTS_MAX_AGE, Limits, Timeouts

from ..cluster import PEERS_UNKNOWN, Connection, retry_while_forming
from ..wire import subjects
from ._pull import Puller

__all__ = ["add_pull_consumer", "add_results_consumer", "ensure_streams", "pull_results", "results_consumer"]


async def ensure_streams(conn: Connection) -> None:
    """Create the task and result streams, or bring an existing one to this config (but
    its replica count, which only the one that creates it sets: `bus.cluster`). The config
    is the defaults' (`Timeouts.duplicate_window`): every caller shares the streams."""
    replicas = conn.replicas
    for config in (
        StreamConfig(
            name=subjects.TASKS_STREAM,
            subjects=[subjects.tasks_all()],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=DEFAULT_TIMEOUTS.duplicate_window,
            num_replicas=replicas,
        ),
        StreamConfig(
            name=subjects.RESULTS_STREAM,
            subjects=[subjects.results_all()],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            duplicate_window=DEFAULT_TIMEOUTS.duplicate_window,
            max_age=RESULTS_MAX_AGE,
            num_replicas=replicas,
        ),
    ):
        await retry_while_forming(conn, functools.partial(_add_or_update, conn.js, config))


async def _add_or_update(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code == PEERS_UNKNOWN:
            raise  # the cluster is forming: asked again by `retry_while_forming`
        existing = await js.stream_info(config.name or "")
        config.num_replicas = existing.config.num_replicas
        if _differs(config, existing.config):
            await js.update_stream(config)


def _differs(wanted: StreamConfig, existing: StreamConfig) -> bool:
    return any(
        (getattr(wanted, name) or None) != (getattr(existing, name) or None)
        for name in ("subjects", "retention", "storage", "duplicate_window", "max_age", "num_replicas")
    )


def results_consumer(run_id: str) -> str:
    """The durable consumer through which the one process that asked for run `run_id` reads its results."""
    return f"gym-run-{run_id}"


async def add_results_consumer(conn: Connection, run_id: str, limits: Limits, timeouts: Timeouts) -> str:
    """Create the results consumer of run `run_id`, delivering from its first result; its name."""
    return await add_pull_consumer(
        conn, subjects.RESULTS_STREAM, results_consumer(run_id), subjects.results(run_id),
        ack_wait=timeouts.result_ack_wait, max_ack_pending=limits.result_window * 2,
        inactive_threshold=RESULTS_MAX_AGE,
    )  # fmt: skip


async def add_pull_consumer(
    conn: Connection,
    stream: str,
    name: str,
    filter_subject: str,
    *,
    ack_wait: float,
    max_ack_pending: int,
    max_deliver: int | None = None,
    max_waiting: int | None = None,
    inactive_threshold: float | None = None,
) -> str:
    """Create the durable pull consumer `name` of `stream` (one that exists with this config
    is kept), delivering every message on `filter_subject` from the first; its name. The
    limits are the caller's (`None`: the server's default)."""
    config = ConsumerConfig(
        durable_name=name,
        filter_subject=filter_subject,
        deliver_policy=DeliverPolicy.ALL,
        # Explicit, not ALL: acking the last of a batch would also ack messages lost in
        # transit during a reconnect, which then are never delivered again.
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_ack_pending=max_ack_pending,
        max_deliver=max_deliver,
        max_waiting=max_waiting,
        inactive_threshold=inactive_threshold,
    )
    await retry_while_forming(conn, lambda: conn.js.add_consumer(stream, config))
    return name


async def pull_results(
    conn: Connection, run_id: str, on_message: Callable[[Msg], None], limits: Limits, timeouts: Timeouts
) -> Puller:
    """Start pulling the results of run `run_id`, from its first, into `on_message`."""
    name = await add_results_consumer(conn, run_id, limits, timeouts)
    window = limits.result_window
    puller = Puller(
        conn, subjects.RESULTS_STREAM, name, window, on_message, batch=window // 4, timeouts=timeouts
    )
    await puller.start()
    return puller
