"""NATS plumbing, and the hosting that turns functions into services, task consumers and
callers. The contract it carries (structs, errors, limits, headers) is `schemas`'; the
functions it hosts are `functions`', which know nothing of NATS.

Its rooms, from the bottom up (each imports only the ones before it):

    cluster     the bus's storage on a cluster that may still be forming
    wire        subjects, encoding, requests, retries, claim checks
    security    credentials and roles
    connection  connecting, the embedded server, who serves what
    policy      the policy under training: versions, adapters, syncers
    run         the run protocol's client side: `RunClient`, `RunBook`, `Verifier`
    hosting     services, environments, models, agents, an agent worker's task consumer

This module exports what runners and users need; the rest is the rooms' own (`gymbus.bus.run`, ...).
"""

from .connection import (
    Bus,
    Connection,
    EmbeddedServer,
    QueueDepth,
    ServiceStats,
    connect,
    connect_bus,
    die_with_parent,
    is_served,
    model_servers,
    nats_url_from_env,
    open_bus,
    served_agents,
    served_within,
    service_infos,
    service_stats,
    task_queues,
    tune_gc,
    unserved,
    wait_served,
    write_seed,
)
from .hosting import (
    Endpoint,
    Handler,
    ServeOptions,
    ServiceHost,
    ServiceSpec,
    Slots,
    TaskConsumer,
    environment_service,
    model_service,
    serve_functions,
)
from .policy import AdapterSyncer, PolicyPublisher, Published, sync_adapters
from .run import (
    RunBook,
    RunClient,
    RunResult,
    Submitted,
    Verifier,
    not_sent_message,
    not_served,
    unserved_row,
)
from .security import ENV_VARS, BusAuth, Role
from .wire import nested_deeper, request, subjects

__all__ = [
    "ENV_VARS",
    "AdapterSyncer",
    "Bus",
    "BusAuth",
    "Connection",
    "EmbeddedServer",
    "Endpoint",
    "Handler",
    "PolicyPublisher",
    "Published",
    "QueueDepth",
    "Role",
    "RunBook",
    "RunClient",
    "RunResult",
    "ServeOptions",
    "ServiceHost",
    "ServiceSpec",
    "ServiceStats",
    "Slots",
    "Submitted",
    "TaskConsumer",
    "Verifier",
    "connect",
    "connect_bus",
    "die_with_parent",
    "environment_service",
    "is_served",
    "model_servers",
    "model_service",
    "nats_url_from_env",
    "nested_deeper",
    "not_sent_message",
    "not_served",
    "open_bus",
    "request",
    "serve_functions",
    "served_agents",
    "served_within",
    "service_infos",
    "service_stats",
    "subjects",
    "sync_adapters",
    "task_queues",
    "tune_gc",
    "unserved",
    "unserved_row",
    "wait_served",
    "write_seed",
]
