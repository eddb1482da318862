"""`gym-runner status`: every live function and its counts, and the task queues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.aio.client import Client
from nats.micro.service import ServiceStats
from rich.console import Console
from rich.table import Table

from gymbus.bus import service_stats, subjects

__all__ = ["QueueDepth", "gather_status", "render_status", "status_json"]


@dataclass(frozen=True)
class QueueDepth:
    """An agent's task queue: waiting, being worked on, and delivered more than once."""

    agent: str
    waiting: int
    in_flight: int
    redelivered: int


async def gather_status(nc: Client) -> tuple[list[ServiceStats], list[QueueDepth]]:
    stats = sorted(await service_stats(nc), key=lambda s: (s.metadata.get("kind", ""), s.name, s.id))
    return stats, await _queues(nc)


async def _queues(nc: Client) -> list[QueueDepth]:
    js = nc.jetstream()
    try:
        consumers = await js.consumers_info(subjects.TASKS_STREAM)
    except nats.js.errors.NotFoundError:
        return []
    return [
        QueueDepth(
            agent=subjects.agent_of_tasks(info.config.filter_subject or ""),
            waiting=info.num_pending or 0,
            in_flight=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
        )
        for info in consumers
    ]


def render_status(stats: list[ServiceStats], queues: list[QueueDepth], console: Console) -> None:
    table = Table(title="live functions", title_justify="left")
    for column in ("function", "kind", "instance", "endpoint", "requests", "errors", "avg ms", "last error"):
        table.add_column(column, justify="right" if column in ("requests", "errors", "avg ms") else "left")
    for service in stats:
        for endpoint in service.endpoints:
            table.add_row(
                service.name, service.metadata.get("kind", ""), service.id[-8:], endpoint.subject,
                str(endpoint.num_requests), str(endpoint.num_errors),
                f"{endpoint.average_processing_time / 1e6:.2f}", (endpoint.last_error or "")[:60],
            )  # fmt: skip
    console.print(table if stats else "no live functions (start some with `gym-runner serve`)")
    if queues:
        queue_table = Table(title="task queues", title_justify="left")
        for column in ("agent", "waiting", "in flight", "redelivered"):
            queue_table.add_column(column, justify="left" if column == "agent" else "right")
        for queue in queues:
            queue_table.add_row(queue.agent, str(queue.waiting), str(queue.in_flight), str(queue.redelivered))
        console.print(queue_table)


def status_json(stats: list[ServiceStats], queues: list[QueueDepth]) -> dict[str, Any]:
    return {
        "functions": [service.to_dict() for service in stats],
        "queues": [queue.__dict__ for queue in queues],
    }
