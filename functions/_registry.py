"""The built-in functions, found by name: environments, their agents, and model adapters."""

from __future__ import annotations

import difflib

from ._spec import Agent, Environment, Model, ModelOptions
from .agents import AGENT_KINDS, AGENT_MODELS
from .environments import ENVIRONMENTS
from .models import MODELS

__all__ = ["AGENTS", "agents_of", "find", "names", "policy_adapter"]


def agents_of(env: Environment) -> dict[str, Agent]:
    """The agents `env` declares, by the name datasets use in `agent_ref`."""
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


AGENTS: dict[str, Agent] = {
    name: agent for env in ENVIRONMENTS.values() for name, agent in agents_of(env).items()
}
"""Every agent an environment declares, by the name datasets use in `agent_ref`."""


def names() -> list[str]:
    """Every function name `gym-runner serve` accepts."""
    return sorted({*ENVIRONMENTS, *AGENTS, *MODELS})


def find(name: str) -> Environment | Agent | Model:
    """The function called `name`; `KeyError` with the closest names if there is none."""
    for table in (ENVIRONMENTS, AGENTS, MODELS):
        if name in table:
            return table[name]
    close = difflib.get_close_matches(name, names(), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise KeyError(f"no function named {name!r}{hint}")


def policy_adapter(model: ModelOptions | None) -> str:
    """The model adapter that serves the policy: `vllm` for `api="vllm"`, `openai` for any
    other configured endpoint, else the offline scripted policy."""
    if model is None or not model.base_url:
        return "offline"
    return "vllm" if model.api == "vllm" else "openai"
