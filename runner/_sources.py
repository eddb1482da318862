"""Functions given by where they are written: a file path or a module path on a command line.

`gym-runner serve my_env.py`, `gym-runner serve my_pkg.my_env` and `gym-runner check
my_env.py` load the module into the registry (`gymbus.functions.registry.REGISTRY`) and use the
functions it defines; a worker process started for them is given the same path, made
absolute, and loads it again. `FILE_OR_MODULE:NAME` picks one function of the module
(`my_env/policies.py:careful`): where one is wanted, a module that defines several must say
which.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gymbus.bus import subjects
from gymbus.functions import Agent, Environment, Model
from gymbus.functions.nemo_gym import is_nemo_gym
from gymbus.functions.registry import ENVIRONMENTS, REGISTRY, FunctionClash, agents_of

__all__ = [
    "OwnFunctions",
    "SourceError",
    "absolute",
    "environment_in",
    "function_in",
    "function_names",
    "is_source",
    "selector",
]


class SourceError(ValueError):
    """A file or module given on the command line could not be loaded."""


def is_source(argument: str) -> bool:
    """Whether a command's function argument names a file or module rather than a function:
    function names are single subject tokens, so a `/` or `.` cannot be in one. A NeMo Gym
    server (`nemo-gym:<server>[/<config>]`) is neither."""
    return not is_nemo_gym(argument) and any(mark in argument for mark in "/.\\")


def selector(argument: str) -> tuple[str, str | None]:
    """`FILE_OR_MODULE[:NAME]` as the file or module and the name (`None` if not given)."""
    source, colon, name = argument.rpartition(":")
    if colon and is_source(source) and subjects.is_name(name):
        return source, name
    return argument, None


def absolute(argument: str) -> str:
    """`argument` as a worker started elsewhere reads it: a file path made absolute."""
    source, name = selector(argument)
    if is_source(source) and (source.endswith(".py") or "/" in source or "\\" in source):
        source = str(Path(source).resolve())
    return source if name is None else f"{source}:{name}"


def _load(source: str) -> list[str]:
    try:
        return REGISTRY.load(source)
    except FunctionClash:
        raise  # its message names both sources already
    except SyntaxError as exc:
        raise SourceError(f"{exc.filename}, line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:  # the user's module: whatever it raised is theirs to fix
        raise SourceError(f"{source}: {type(exc).__name__}: {exc}") from exc


def function_names(arguments: Iterable[str]) -> list[str]:
    """The function names `arguments` mean: each file or module path loaded and replaced by
    the names of the functions it defines; each other argument kept as it is."""
    names: list[str] = []
    for argument in arguments:
        if not is_source(argument):
            names.append(argument)
            continue
        source, name = selector(argument)
        defined = _load(source)
        if name is not None and name not in defined:
            raise SourceError(f"{source} defines no function {name!r} (it defines {', '.join(defined)})")
        names += defined if name is None else [name]
    return list(dict.fromkeys(names))


_KIND_NOUNS = {Environment: "environment", Agent: "agent", Model: "model"}


def function_in(argument: str, kind: type[Environment | Agent | Model]) -> str:
    """The name of the one function of `kind` that `argument` means: `FILE_OR_MODULE:NAME`,
    or a file or module that defines one (an agent's module: one `Agent` of its own; the
    default agents of environments it imports count only when it defines none).
    `SourceError` naming what it defines, and how to pick one, otherwise."""
    source, name = selector(argument)
    noun = _KIND_NOUNS[kind]
    found = [one for one in _load(source) if isinstance(REGISTRY.get(one), kind)]
    if name is not None:
        if name not in found:
            defined = f"its {noun}s: {', '.join(found)}" if found else f"it defines no {noun}"
            raise SourceError(f"{source} defines no {noun} named {name!r} ({defined})")
        return name
    if kind is Agent and len(found) > 1:
        found = [one for one in found if not _declared_only(one)] or found
    if len(found) != 1:
        listed = f": {', '.join(found)}" if found else ""
        pick = f"; pick one as {source}:NAME" if found else ""
        raise SourceError(f"{source} defines {len(found)} {noun}s{listed}{pick}")
    return found[0]


def _declared_only(name: str) -> bool:
    """Whether the agent `name` is only the default agent an environment declares in its
    `agents`, not an `Agent` of the module's own."""
    agent = REGISTRY.get(name)
    environment = ENVIRONMENTS.get(agent.environment) if isinstance(agent, Agent) else None
    return environment is not None and agents_of(environment).get(name) == agent


def environment_in(argument: str) -> str:
    """The name of the one environment `argument` (`FILE_OR_MODULE[:NAME]`) means."""
    return function_in(argument, Environment)


@dataclass(frozen=True)
class OwnFunctions:
    """The functions of a user's own a command was given by file or module (`collect
    --agent my_agent.py`), loaded into this process, and how a worker process loads each:
    `absolute FILE_OR_MODULE:NAME`, for every function those modules define (an agent's
    module may define or import the environment it drives)."""

    sources: dict[str, str] = field(default_factory=dict)
    """Function name → the selector a worker is given for it."""

    def load(self, argument: str, kind: type[Environment | Agent | Model]) -> str:
        """The name of the function of `kind` that `argument` means (see `function_in`),
        remembered with every other function its module defines."""
        name = function_in(argument, kind)
        source = selector(argument)[0]
        for defined in _load(source):  # loaded already: the registry keeps a module's first load
            self.sources.setdefault(defined, f"{absolute(source)}:{defined}")
        return name

    def for_worker(self, names: Sequence[str]) -> tuple[str, ...]:
        """`names` as a worker process is given them: each of the user's own as its selector."""
        return tuple(dict.fromkeys(self.sources.get(name, name) for name in names))
