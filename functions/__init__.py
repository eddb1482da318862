"""Environments, agents and model adapters: plain async functions typed with `schemas`.

A function knows nothing of NATS. An environment is a few async functions (tools, an
optional seed, verify); an agent is one async function run once per rollout; a model
adapter is one async function from a Responses API request to a response.
`bus` hosts them as services; nothing here imports `nats` or `bus`.
"""

from ._registry import AGENTS, agents_of, find, names, policy_adapter
from ._spec import (
    Agent,
    AgentFunction,
    AgentUnavailable,
    Calls,
    Environment,
    MemoryState,
    Model,
    ModelFunction,
    ModelOptions,
    Models,
    NoModels,
    Session,
    SessionState,
    TaskMetrics,
    Tool,
    tool,
)
from .agents import AGENT_KINDS
from .environments import ENVIRONMENTS
from .models import MODELS

__all__ = [
    "AGENTS",
    "AGENT_KINDS",
    "ENVIRONMENTS",
    "MODELS",
    "Agent",
    "AgentFunction",
    "AgentUnavailable",
    "Calls",
    "Environment",
    "MemoryState",
    "Model",
    "ModelFunction",
    "ModelOptions",
    "Models",
    "NoModels",
    "Session",
    "SessionState",
    "TaskMetrics",
    "Tool",
    "agents_of",
    "find",
    "names",
    "policy_adapter",
    "tool",
]
