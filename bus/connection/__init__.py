"""Connecting: the client with its timeouts and errors, the embedded server a command
starts when no `NATS_URL` is set, and who serves what on the bus (discovery).
"""

from ._connection import (
    Bus,
    Connection,
    check_permitted,
    connect,
    connect_bus,
    lost_for_good,
    nats_url_from_env,
    open_bus,
    split_urls,
)
from ._discovery import (
    QueueDepth,
    ServiceInfo,
    ServiceStats,
    is_served,
    model_servers,
    served_agents,
    served_subjects,
    served_within,
    service_infos,
    service_stats,
    task_queues,
    unserved,
    wait_served,
)
from ._embedded import EmbeddedServer, die_with_parent, find_server_binary, write_seed
from ._python_gc import tune_gc

__all__ = [
    "Bus",
    "Connection",
    "EmbeddedServer",
    "QueueDepth",
    "ServiceInfo",
    "ServiceStats",
    "check_permitted",
    "connect",
    "connect_bus",
    "die_with_parent",
    "find_server_binary",
    "is_served",
    "lost_for_good",
    "model_servers",
    "nats_url_from_env",
    "open_bus",
    "served_agents",
    "served_subjects",
    "served_within",
    "service_infos",
    "service_stats",
    "split_urls",
    "task_queues",
    "tune_gc",
    "unserved",
    "wait_served",
    "write_seed",
]
