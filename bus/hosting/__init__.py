"""Turning functions into services and task consumers: the service host, environments,
models and agents on their subjects, a rollout's calls, session state, and an agent
worker's side of the task queue.
"""

from ._hosting import ServeOptions, environment_service, model_service, serve_functions, worker_role_name
from ._nemo_gym import HostedServers, hosted_environment_service, nemo_gym_servers
from ._rollout import (
    BusCalls,
    BusModels,
    RolloutHandler,
    ToolCallLost,
    agent_service,
    rollout_task_handler,
    run_rollout,
    served_and_transient,
)
from ._services import Endpoint, Handler, Reporting, ServiceHost, ServiceSpec
from ._sessions import KvSessions
from ._slots import Slots
from ._task_consumer import TaskConsumer, agent_consumer

__all__ = [
    "BusCalls",
    "BusModels",
    "Endpoint",
    "Handler",
    "HostedServers",
    "KvSessions",
    "Reporting",
    "RolloutHandler",
    "ServeOptions",
    "ServiceHost",
    "ServiceSpec",
    "Slots",
    "TaskConsumer",
    "ToolCallLost",
    "agent_consumer",
    "agent_service",
    "environment_service",
    "hosted_environment_service",
    "model_service",
    "nemo_gym_servers",
    "rollout_task_handler",
    "run_rollout",
    "serve_functions",
    "served_and_transient",
    "worker_role_name",
]
