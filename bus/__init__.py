"""NATS plumbing, and the hosting that turns functions into services, task consumers and
callers. The contract it carries (structs, errors, limits, headers) is `schemas`'; the
functions it hosts are `functions`', which know nothing of NATS.

Its rooms (`ROOMS`), from the bottom up (each imports only the ones before it):

    cluster     the connection's owner, and the bus's storage on a cluster that may still be forming
    wire        subjects, encoding, requests, retries, claim checks
    security    credentials and roles
    connection  connecting, the embedded server, who serves what
    policy      the policy under training: versions, adapters, syncers
    run         the run protocol's client side: `RunClient`, `RunBook`, `Verifier`
    hosting     services, environments, models, agents, an agent worker's task consumer
    front       NeMo Gym's clients on the bus: what the HTTP front calls for each route

This module exports what is used outside it (by the runner, tests, benchmarks and users);
the rest is the rooms' own (`gymbus.bus.run`, ...).
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
    nats_url_from_env,
    open_bus,
    served_within,
    service_infos,
    service_stats,
    tune_gc,
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
from .policy import PolicyPublisher, Published, sync_adapters
from .run import (
    RunBook,
    RunClient,
    RunResult,
    Submitted,
    Verifier,
    not_sent_message,
    not_served,
    serve_hint,
    unserved_row,
)
from .security import ENV_VARS, BusAuth, Role
from .wire import nested_deeper, request, subjects

ROOMS = ("cluster", "wire", "security", "connection", "policy", "run", "hosting", "front")
"""The bus's rooms, from the bottom up: each imports only the rooms before it."""

__all__ = [
    "ENV_VARS",
    "ROOMS",
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
    "model_service",
    "nats_url_from_env",
    "nested_deeper",
    "not_sent_message",
    "not_served",
    "open_bus",
    "request",
    "serve_hint",
    "serve_functions",
    "served_within",
    "service_infos",
    "service_stats",
    "subjects",
    "sync_adapters",
    "tune_gc",
    "unserved_row",
    "wait_served",
    "write_seed",
]
