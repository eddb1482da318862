"""Each package's public surface is exactly its `__all__`; everything else is private."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

from gymbus import bus, functions, runner, schemas
from gymbus.functions import registry

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
ROOMS = [importlib.import_module(f"gymbus.bus.{room}") for room in bus.ROOMS]


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


OUTSIDE_BUS = ("runner", "tests", "bench", "scripts", "examples", "docs")
"""Where the bus's users are: a name used only inside bus/ is its room's own."""


IMPORTS = re.compile(r"from gymbus\.bus import (\([^)]*\)|[^\n#]*)")
READS = re.compile(r"\bbus\.(\w+)")


def _bus_names_used_in(text: str) -> set[str]:
    """The names of `gymbus.bus` that a file or page imports (`from gymbus.bus import X`) or,
    having imported the module (`from gymbus import bus`), reads (`bus.X`)."""
    found = {name for names in IMPORTS.findall(text) for name in re.findall(r"\w+", names)}
    if "from gymbus import bus" in text or "import gymbus.bus" in text:
        found |= set(READS.findall(text))
    return found


def test_bus_exports_what_is_used_outside_it_and_its_rooms_the_rest() -> None:
    used = set().union(
        *(
            _bus_names_used_in(path.read_text())
            for folder in OUTSIDE_BUS
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in (".py", ".md") and "node_modules" not in path.parts and path != HERE
        )
    )
    assert sorted(set(bus.__all__) - used) == []
    assert all(name in room.__all__ for name in bus.__all__ for room in ROOMS if hasattr(room, name))
