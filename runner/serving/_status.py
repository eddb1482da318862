"""`gym-runner status`: every live function and its counts, and the task queues."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from gymbus.bus import Bus, QueueDepth, ServiceStats

__all__ = ["gather_status", "render_status", "status_json"]


async def gather_status(bus: Bus) -> tuple[list[ServiceStats], list[QueueDepth]]:
    stats = sorted(await bus.service_stats(), key=lambda s: (s.metadata.get("kind", ""), s.name, s.id))
    return stats, await bus.task_queues()


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
