"""Environment settings from the process environment: NeMo Gym's per-server config.

An environment with settings reads them from one variable, `GYMBUS_<ENVIRONMENT>` (the
environment's name upper-cased), holding a JSON object whose keys are the settings to
change; every other setting keeps its default. For example:

    GYMBUS_MATH_WITH_JUDGE='{"should_use_judge": true, "judge_model": "judge"}'

Worker processes started by `gym-runner collect` inherit the variable. An environment that
names its settings' type (`Environment.settings`) has the variable checked before the first
rollout (`Environment.check_settings`: `collect` does, on the embedded default). A variable
that is not a JSON object of the right types also makes every verify of that environment fail
with a `BadRequest` naming the variable, rather than silently grading with defaults.
"""

from __future__ import annotations

import os
from typing import TypeVar

import msgspec

from gymbus.schemas import BadRequest

__all__ = ["settings", "settings_variable"]

T = TypeVar("T", bound=msgspec.Struct)

_cache: dict[tuple[type, str], msgspec.Struct] = {}


def settings_variable(environment: str) -> str:
    """The variable holding `environment`'s settings."""
    return "GYMBUS_" + environment.upper()


def settings(kind: type[T], environment: str) -> T:
    """`environment`'s settings as `kind`: its defaults, changed by the variable's JSON."""
    variable = settings_variable(environment)
    text = os.environ.get(variable, "").strip()
    key = (kind, text)
    if key not in _cache:
        try:
            _cache[key] = msgspec.json.decode(text or "{}", type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            fields = ", ".join(kind.__struct_fields__)
            raise BadRequest(
                f"invalid settings in ${variable}: {exc} ({environment}'s settings: {fields})"
            ) from None
    value = _cache[key]
    assert isinstance(value, kind)
    return value
