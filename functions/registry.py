"""Every function by name: the registry the commands look names up in (`gym-runner serve`,
`collect`, `check`, `secure init`), over GymBus's built-ins and the user's own.

Listing names imports no function: a function's module is imported when it is first looked
up. An environment, agent or model of your own needs nothing here (`gymbus.functions` is
what you write one with); your package makes its functions known by an entry point of the
group `ENTRY_POINT_GROUP` (`gymbus.functions`).
"""

from ._registry import (
    AGENTS,
    ENTRY_POINT_GROUP,
    ENVIRONMENTS,
    MODELS,
    REGISTRY,
    FunctionClash,
    Registry,
    Spec,
    agents_of,
    find,
    names,
    policy_adapter,
)
from .agents import AGENT_KINDS

__all__ = [
    "AGENTS",
    "AGENT_KINDS",
    "ENTRY_POINT_GROUP",
    "ENVIRONMENTS",
    "MODELS",
    "REGISTRY",
    "FunctionClash",
    "Registry",
    "Spec",
    "agents_of",
    "find",
    "names",
    "policy_adapter",
]
