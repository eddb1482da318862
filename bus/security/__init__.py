"""Who may do what on a locked bus: credentials (`BusAuth`) and the roles that grant
subjects, streams and buckets.
"""

from ._auth import ENV_VARS, BusAuth, inbox_prefix_for
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

__all__ = [
    "BusAuth",
    "ENV_VARS",
    "Role",
    "adapters_role",
    "admin_role",
    "agent_role",
    "combined_role",
    "environment_role",
    "hosted_server_role",
    "inbox_prefix_for",
    "model_role",
    "monitor_role",
    "producer_role",
    "runner_role",
    "server_authorization",
    "worker_role",
]
