"""Each package's public surface is exactly its `__all__`; everything else is private."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from gymbus import bus, functions, runner, schemas
from gymbus.bus import cluster, connection, hosting, policy, run, security, wire
from gymbus.functions import registry

ROOMS = [cluster, wire, security, connection, policy, run, hosting]


@pytest.mark.parametrize(
    "package", [schemas, bus, *ROOMS, functions, registry, runner], ids=lambda p: p.__name__
)
def test_public_names_are_exactly_all(package: ModuleType) -> None:
    # dir(), not vars(): a package may load its names when first used (runner/ does).
    public = {
        name
        for name in dir(package)
        if not name.startswith("_")
        and (not inspect.ismodule(getattr(package, name)) or name in package.__all__)
    }
    assert set(package.__all__) == public
    assert len(package.__all__) == len(set(package.__all__))


AUTHORING = [
    "Agent",
    "AgentFunction",
    "AgentUnavailable",
    "BadRequest",
    "Calls",
    "Environment",
    "GymError",
    "Item",
    "MemoryState",
    "Model",
    "ModelFunction",
    "ModelOptions",
    "Models",
    "NoModels",
    "NotFound",
    "Response",
    "ResponsesCreateParams",
    "SeedRequest",
    "Session",
    "SessionState",
    "TaskMetrics",
    "Tool",
    "VerifyRequest",
    "VerifyResult",
    "settings",
    "tool",
]
"""What someone writing an environment, an agent or a model adapter imports, and nothing else."""

REGISTRY = [
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
"""What the commands look function names up with."""


def test_functions_exports_the_authoring_names_and_the_registry_the_lookup() -> None:
    assert functions.__all__ == AUTHORING
    assert registry.__all__ == REGISTRY


def test_bus_exports_what_runners_and_users_need_and_its_rooms_the_rest() -> None:
    # 104 names once, side by side; a name only one room's neighbours use is that room's.
    assert len(bus.__all__) <= 52
    assert all(name in room.__all__ for name in bus.__all__ for room in ROOMS if hasattr(room, name))
