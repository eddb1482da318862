"""NATS plumbing, and the hosting that turns functions into services, task consumers and
callers: connection, embedded server, subjects, codec, service host, task queue, session
state, claim checks and retries.

The contract it carries (structs, errors, limits, headers) is `schemas`'; the functions it
hosts are `functions`', which know nothing of NATS.
"""

from . import _subjects as subjects
from ._adapter_sync import AdapterSyncer, sync_adapters
from ._auth import ENV_VARS, BusAuth, inbox_prefix_for
from ._claim_checks import CLAIM, check_in, check_out, claim_store_config, ensure_claim_store, needs_claim, release_claim
from ._codec import decode, decoder, encode, encode_error_reply, nested_deeper
from ._connection import (
    Bus,
    Connection,
    check_permitted,
    connect,
    lost_for,
    lost_for_good,
    nats_url_from_env,
    open_bus,
    split_urls,
)
from ._dead_letters import ExhaustedTasks
from ._discovery import (
    QueueDepth,
    ServiceInfo,
    ServiceStats,
    is_served,
    model_servers,
    served_agents,
    served_subjects,
    service_infos,
    service_stats,
    task_queues,
    unserved,
    wait_served,
)
from ._embedded import EmbeddedServer, die_with_parent, find_server_binary, write_seed
from ._python_gc import tune_gc
from ._hosting import ServeOptions, environment_service, model_service, serve_functions, worker_role_name
from ._policy import (
    ADAPTER_SERVERS_BUCKET,
    ADAPTERS_BUCKET,
    POLICIES_BUCKET,
    PolicyPublisher,
    PolicyVersions,
    Published,
    adapter_reports,
    adapter_store,
    live_reports,
    policy_records,
)
from ._publish import TaskPublisher, task_headers
from ._pull import Puller
from ._replicas import replicas_from_env, replicas_of, set_replicas
from ._request import request
from ._retry import retrying
from ._roles import (
    Role,
    adapters_role,
    admin_role,
    agent_role,
    combined_role,
    environment_role,
    hosted_server_role,
    model_role,
    monitor_role,
    producer_role,
    runner_role,
    server_authorization,
    worker_role,
)
from ._rollout import (
    BusCalls,
    BusModels,
    RolloutHandler,
    agent_service,
    rollout_task_handler,
    run_rollout,
)
from ._run_client import RunClient, RunResult
from ._runkeys import RUNS_BUCKET, run_key, task_token, token_matches
from ._services import Endpoint, Handler, ServiceHost, ServiceSpec
from ._sessions import SESSIONS_BUCKET, KvSessions
from ._slots import Slots
from ._tasks import (
    TaskConsumer,
    add_results_consumer,
    agent_consumer,
    ensure_streams,
    pull_results,
    results_consumer,
)

__all__ = [
    "ADAPTERS_BUCKET",
    "ADAPTER_SERVERS_BUCKET",
    "CLAIM",
    "ENV_VARS",
    "POLICIES_BUCKET",
    "RUNS_BUCKET",
    "SESSIONS_BUCKET",
    "Bus",
    "AdapterSyncer",
    "BusAuth",
    "BusCalls",
    "BusModels",
    "Connection",
    "EmbeddedServer",
    "Endpoint",
    "ExhaustedTasks",
    "Handler",
    "KvSessions",
    "PolicyPublisher",
    "PolicyVersions",
    "Published",
    "Puller",
    "QueueDepth",
    "Role",
    "RolloutHandler",
    "RunClient",
    "RunResult",
    "ServeOptions",
    "ServiceHost",
    "ServiceInfo",
    "ServiceSpec",
    "ServiceStats",
    "Slots",
    "TaskConsumer",
    "TaskPublisher",
    "adapter_reports",
    "adapters_role",
    "adapter_store",
    "add_results_consumer",
    "admin_role",
    "agent_consumer",
    "agent_role",
    "agent_service",
    "check_in",
    "check_out",
    "check_permitted",
    "claim_store_config",
    "combined_role",
    "connect",
    "decode",
    "decoder",
    "die_with_parent",
    "encode",
    "encode_error_reply",
    "ensure_claim_store",
    "ensure_streams",
    "environment_role",
    "environment_service",
    "find_server_binary",
    "hosted_server_role",
    "inbox_prefix_for",
    "is_served",
    "live_reports",
    "lost_for",
    "lost_for_good",
    "model_role",
    "model_servers",
    "model_service",
    "monitor_role",
    "nats_url_from_env",
    "needs_claim",
    "nested_deeper",
    "open_bus",
    "policy_records",
    "producer_role",
    "pull_results",
    "release_claim",
    "replicas_from_env",
    "replicas_of",
    "request",
    "results_consumer",
    "retrying",
    "rollout_task_handler",
    "run_key",
    "run_rollout",
    "runner_role",
    "serve_functions",
    "served_agents",
    "served_subjects",
    "server_authorization",
    "service_infos",
    "service_stats",
    "set_replicas",
    "split_urls",
    "sync_adapters",
    "subjects",
    "task_headers",
    "task_queues",
    "task_token",
    "token_matches",
    "tune_gc",
    "unserved",
    "wait_served",
    "worker_role",
    "worker_role_name",
    "write_seed",
]
