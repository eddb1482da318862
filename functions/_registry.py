"""Every function by name: GymBus's built-ins and the user's own, in one registry.

A function comes from one of three sources:

- built in: the modules of `gymbus.functions.environments`, the agents their
  environments declare, and the model adapters of `gymbus.functions.models`;
- an installed package: an entry point of the group `gymbus.functions`, naming a module
  (`my_env = my_pkg.my_env`) or an object (`my_env = my_pkg.my_env:ENVIRONMENT`);
- a file or module given by path (`gym-runner serve path/to/my_env.py`,
  `gym-runner serve my_pkg.my_env`), loaded into this process by `Registry.load`.

A module's functions are its module-level `Environment`, `Agent` and `Model` objects; an
environment brings the agents it names in `agents`. Two sources that define one name are
an error naming both (`FunctionClash`): a name is a subject on the bus, and two different
functions serving one subject would answer each other's rollouts.

Built-ins are known by entry point ("module:attribute", as Gymnasium's `EnvSpec` stores
one), so listing names imports none of them: a function's module is imported when it is
first used (a worker imports what it serves). An installed package's entry point may name
a module, whose names are known only once it is imported: those are loaded at the first
lookup, so a clash with them is found by whichever process looks a name up.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

from ._spec import Agent, Environment, Model, ModelOptions
from .agents import AGENT_KINDS, AGENT_MODELS
from .environments import AGENT_ENTRY_POINTS, ENVIRONMENT_ENTRY_POINTS

__all__ = [
    "AGENTS",
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

Spec = Environment | Agent | Model
"""A function: an environment, an agent or a model adapter."""

ENTRY_POINT_GROUP = "gymbus.functions"
"""The entry-point group installed packages declare their functions in."""

BUILT_IN = "GymBus's built-ins"

log = logging.getLogger("gymbus.functions")

T = TypeVar("T", Environment, Agent, Model)


class FunctionClash(ValueError):
    """Two sources define a function of one name."""


def agents_of(env: Environment) -> dict[str, Agent]:
    """The agents `env` declares, by the name datasets use in `agent_ref`."""
    if env.agents and env.agent_kind not in AGENT_KINDS:
        raise ValueError(
            f"environment {env.name!r}: unknown agent_kind {env.agent_kind!r} "
            f"(known: {', '.join(sorted(AGENT_KINDS))})"
        )
    return {
        name: Agent(
            name=name,
            rollout=AGENT_KINDS[env.agent_kind],
            environment=env.name,
            max_steps=env.max_steps,
            description=f"{env.agent_kind} over {env.name}",
            other_models=AGENT_MODELS.get(env.agent_kind, ()),
        )
        for name in env.agents
    }


MODEL_ENTRY_POINTS: dict[str, str] = {
    "offline": "gymbus.functions.models.offline:MODEL",
    "openai": "gymbus.functions.models:OPENAI",
    "vllm": "gymbus.functions.models:VLLM",
}
"""Every built-in model adapter, by name: where it is defined."""

Kind = type[Environment] | type[Agent] | type[Model]

_BUILT_INS: dict[str, tuple[str, Kind]] = {
    **{name: (entry_point, Environment) for name, entry_point in ENVIRONMENT_ENTRY_POINTS.items()},
    **{name: (entry_point, Agent) for name, entry_point in AGENT_ENTRY_POINTS.items()},
    **{name: (entry_point, Model) for name, entry_point in MODEL_ENTRY_POINTS.items()},
}
"""Every built-in function, by name: its entry point and its kind, known without importing it."""


@cache  # one object per name: an environment's agents are made afresh by each `agents_of`
def _builtin(name: str) -> Spec | None:
    """The built-in function `name`, its module imported now; `None` if there is none."""
    if name not in _BUILT_INS:
        return None
    entry_point, kind = _BUILT_INS[name]
    loaded = importlib.metadata.EntryPoint(name, entry_point, BUILT_IN).load()
    if kind is Agent and isinstance(loaded, Environment):
        loaded = agents_of(loaded).get(name)
    if not isinstance(loaded, kind) or loaded.name != name:
        raise TypeError(f"the entry point {entry_point} of {name!r} is not the {kind.__name__} {name!r}")
    return loaded


class Registry:
    """Functions by name, from the built-ins, installed packages and loaded modules."""

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self._group = group
        self._added: dict[str, tuple[Spec, str]] = {}  # name -> (spec, source)
        self._broken: list[str] = []  # entry points that failed to load, described
        self._entry_points_loaded = False
        self._clash: FunctionClash | None = None  # between installed packages: every lookup fails

    def find(self, name: str) -> Spec:
        """The function called `name`; `KeyError` with the closest names if there is none."""
        spec = self.get(name)
        if spec is not None:
            return spec
        close = difflib.get_close_matches(name, self.names(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        broken = f"; {'; '.join(self._broken)}" if self._broken else ""
        raise KeyError(f"no function named {name!r}{hint}{broken}")

    def get(self, name: str) -> Spec | None:
        """The function called `name` (its module imported now, if it is a built-in), or `None`."""
        self._load_installed()
        added = self._added.get(name)
        return added[0] if added is not None else _builtin(name)

    def kind(self, name: str) -> Kind | None:
        """Whether `name` is an `Environment`, an `Agent` or a `Model` (`None`: no function),
        without importing it."""
        self._load_installed()
        added = self._added.get(name)
        if added is not None:
            return type(added[0])
        return _BUILT_INS[name][1] if name in _BUILT_INS else None

    def source(self, name: str) -> str:
        """Where the function called `name` comes from (for messages)."""
        self.find(name)
        added = self._added.get(name)
        return added[1] if added is not None else BUILT_IN

    def names(self) -> list[str]:
        """Every function name: environments, agents and models (importing none of them)."""
        self._load_installed()
        return sorted({*_BUILT_INS, *self._added})

    def add(self, specs: Iterable[Spec], source: str) -> list[str]:
        """Register `specs` (and the agents each environment declares) as coming from
        `source`; their names. `FunctionClash` if another source defines one of them."""
        expanded = _with_agents(specs)
        for spec in expanded:
            self._check_free(spec, source)
        for spec in expanded:
            self._added.setdefault(spec.name, (spec, source))
        return [spec.name for spec in expanded]

    def remove(self, names: Iterable[str]) -> None:
        """Forget functions added by `add` or `load` (tests)."""
        for name in names:
            self._added.pop(name, None)

    def load(self, target: str) -> list[str]:
        """Import a file (`path/to/my_env.py`) or a module (`my_pkg.my_env`) and register
        the functions it defines; their names. `ValueError` if it defines none."""
        path = Path(target)
        self._load_entry_points()  # first: a file an installed package imported is that module
        is_file = target.endswith(".py") or "/" in target or "\\" in target
        if is_file:
            source = f"file {path.resolve()}"
            # A file loaded twice (serve, then check, in one process) keeps its first load.
            known = [name for name, (_, src) in self._added.items() if src == source]
            if known:
                return known
            module = _import_file(path)
        else:
            source = f"module {target}"
            module = importlib.import_module(target)
        found = self.add(_specs_in(module), source)
        if not found:
            raise ValueError(f"{source} defines no Environment, Agent or Model at module level")
        return found

    def _check_free(self, spec: Spec, source: str) -> None:
        added = self._added.get(spec.name)
        if added is not None and not _same(added[0], spec):
            raise FunctionClash(f"{spec.name!r} is defined twice: by {added[1]} and by {source}")
        builtin = _builtin(spec.name)
        if builtin is not None and not _same(builtin, spec):
            raise FunctionClash(f"{spec.name!r} is defined twice: by {BUILT_IN} and by {source}")

    def _load_installed(self) -> None:
        """Load the installed packages' entry points, once; `FunctionClash` if two define one name."""
        self._load_entry_points()
        if self._clash is not None:
            raise self._clash

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True  # first: a loaded module may itself look names up
        for entry in importlib.metadata.entry_points(group=self._group):
            dist = f" (package {entry.dist.name})" if entry.dist is not None else ""
            source = f"entry point {entry.name} = {entry.value}{dist}"
            try:
                loaded = entry.load()
            except Exception as exc:  # a broken package must not stop other functions
                self._broken.append(f"{source} failed to load: {type(exc).__name__}: {exc}")
                log.warning("%s", self._broken[-1])
                continue
            try:
                self.add(_specs_in(loaded), source)
            except FunctionClash as exc:
                self._clash = exc
                return
            except (TypeError, ValueError) as exc:
                self._broken.append(f"{source}: {exc}")
                log.warning("%s", self._broken[-1])

    def table(self, kind: type[T]) -> Mapping[str, T]:
        """The functions of one kind, by name, as a read-only mapping."""
        return _Table(self, kind)


class _Table(Mapping[str, T], Generic[T]):
    def __init__(self, registry: Registry, kind: type[T]) -> None:
        self._registry = registry
        self._kind: type[T] = kind

    def __getitem__(self, name: str) -> T:
        spec = self._registry.get(name)
        if not isinstance(spec, self._kind):
            raise KeyError(name)
        return spec

    def __contains__(self, name: object) -> bool:
        kind = self._registry.kind(name) if isinstance(name, str) else None
        return kind is not None and issubclass(kind, self._kind)

    def __iter__(self) -> Iterator[str]:  # names only: the functions are imported by `[name]`
        return iter([name for name in self._registry.names() if name in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _same(one: Spec, other: Spec) -> bool:
    """Whether two registrations are of one function: the same object, or equal agents (an
    environment's default agents are made afresh each time its module is registered, by
    its file and then by its module path, say)."""
    return one is other or (isinstance(one, Agent) and one == other)


def _specs_in(loaded: object) -> list[Spec]:
    """The functions a loaded entry point or module defines."""
    if isinstance(loaded, Environment | Agent | Model):
        return [loaded]
    if isinstance(loaded, ModuleType):
        return [value for value in vars(loaded).values() if isinstance(value, Environment | Agent | Model)]
    if isinstance(loaded, list | tuple):
        return [value for value in loaded if isinstance(value, Environment | Agent | Model)]
    raise TypeError(f"{loaded!r} is not a module, an Environment, an Agent, a Model or a list of them")


def _with_agents(specs: Iterable[Spec]) -> list[Spec]:
    """`specs`, then the agents each environment declares, one object per name: an `Agent`
    of the module's own takes the place of the one its environment would get by default."""
    out: dict[str, Spec] = {}
    for spec in specs:
        if out.setdefault(spec.name, spec) is not spec:
            raise FunctionClash(f"{spec.name!r} is defined twice in one module")
    for env in [spec for spec in out.values() if isinstance(spec, Environment)]:
        for name, agent in agents_of(env).items():
            if not isinstance(out.setdefault(name, agent), Agent):
                raise FunctionClash(f"{name!r} is both an agent of {env.name!r} and another function")
    return list(out.values())


def _import_file(path: Path) -> ModuleType:
    """Import a Python file as Python would find it: a file inside a package (folders with
    `__init__.py`) as that package's module, with the package's parent folder on `sys.path`
    (so its relative imports work); a lone file under its own name, with its folder on
    `sys.path` (so it may import its neighbours), as `python path` runs it."""
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    for module in list(sys.modules.values()):
        if _file_of(module) == path:
            return module  # already imported (by an installed package's entry point, say)
    parts, folder = [path.stem], path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    name = ".".join(parts)
    if name in sys.modules:
        raise FunctionClash(
            f"{path} is the module {name!r}, already imported from {_file_of(sys.modules[name])}: two "
            "copies of one package would define the same functions (serve the installed one by name, "
            "or uninstall it)"
        )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    module = importlib.import_module(name)
    if _file_of(module) != path:
        raise ValueError(f"{path}: importing {name!r} found {_file_of(module)} instead; rename the file")
    return module


def _file_of(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if isinstance(file, str) else None


REGISTRY = Registry()
"""The registry every command looks function names up in."""

ENVIRONMENTS: Mapping[str, Environment] = REGISTRY.table(Environment)
"""Every environment, by name (built in and installed)."""

AGENTS: Mapping[str, Agent] = REGISTRY.table(Agent)
"""Every agent, by the name datasets use in `agent_ref` (built in and installed)."""

MODELS: Mapping[str, Model] = REGISTRY.table(Model)
"""Every model adapter, by name (built in and installed)."""


def names() -> list[str]:
    """Every function name `gym-runner serve` accepts."""
    return REGISTRY.names()


def find(name: str) -> Spec:
    """The function called `name`; `KeyError` with the closest names if there is none."""
    return REGISTRY.find(name)


def policy_adapter(model: ModelOptions | None) -> str:
    """The model adapter that serves the policy: `vllm` for `api="vllm"`, `openai` for any
    other configured endpoint, else the offline scripted policy."""
    if model is None or not model.base_url:
        return "offline"
    return "vllm" if model.api == "vllm" else "openai"
