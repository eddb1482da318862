"""Functions given by where they are written: a file path or a module path on a command line.

`gym-runner serve my_env.py`, `gym-runner serve my_pkg.my_env` and `gym-runner check
my_env.py` load the module into the registry (`gymbus.functions.REGISTRY`) and use the
functions it defines; a worker process started for them is given the same path, made
absolute, and loads it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gymbus.functions import ENVIRONMENTS, REGISTRY, FunctionClash
from gymbus.functions.nemo_gym import is_nemo_gym

__all__ = ["SourceError", "absolute", "environment_in", "function_names", "is_source"]


class SourceError(ValueError):
    """A file or module given on the command line could not be loaded."""


def is_source(argument: str) -> bool:
    """Whether a command's function argument names a file or module rather than a function:
    function names are single subject tokens, so a `/` or `.` cannot be in one. A NeMo Gym
    server (`nemo-gym:<server>[/<config>]`) is neither."""
    return not is_nemo_gym(argument) and any(mark in argument for mark in "/.\\")


def absolute(argument: str) -> str:
    """`argument` as a worker started elsewhere reads it: a file path made absolute."""
    if is_source(argument) and (argument.endswith(".py") or "/" in argument or "\\" in argument):
        return str(Path(argument).resolve())
    return argument


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
        names += _load(argument) if is_source(argument) else [argument]
    return list(dict.fromkeys(names))


def environment_in(source: str) -> str:
    """The name of the one environment a file or module defines."""
    found = [name for name in _load(source) if name in ENVIRONMENTS]
    if len(found) != 1:
        listed = f": {', '.join(found)}" if found else ""
        raise SourceError(f"{source} defines {len(found)} environments{listed}; give a file with exactly one")
    return found[0]
