"""Environments: every public module here defines one, `ENVIRONMENT`, named as its module is.

A module is imported when its environment is first asked for, so a worker imports only
the environments it serves (code_gen's sandbox, the workplace's tables, reasoning-gym's
scorers are not every process's cost).
"""

from __future__ import annotations

import importlib
import pkgutil

from .._spec import Environment

__all__ = ["builtin_environment", "builtin_environment_names"]


def builtin_environment_names() -> list[str]:
    """The name of every built-in environment, without importing any."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


def builtin_environment(name: str) -> Environment | None:
    """The built-in environment called `name` (its module imported now), or `None`."""
    if name not in builtin_environment_names():
        return None
    env = getattr(importlib.import_module(f"{__name__}.{name}"), "ENVIRONMENT", None)
    if not isinstance(env, Environment) or env.name != name:
        raise TypeError(f"{__name__}.{name} must define ENVIRONMENT, an Environment named {name!r}")
    return env
