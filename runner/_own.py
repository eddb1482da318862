"""`--agent FILE` and `--model FILE` (`collect`, `talk`): an agent or a policy model of the
user's own, given by the file or module that defines it, as a built-in is given by name.

The file is loaded here (its names join the registry, so the rows' `agent_ref` and the
agent's environment resolve), and the workers `collect` starts load it again
(`OwnFunctions.for_worker`). Without `--model-url`, `--model` names the model function
that serves the policy; with it, the model at that endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import typer

from gymbus.functions import Agent, Model
from gymbus.functions.registry import AGENTS, ENVIRONMENTS, MODELS, FunctionClash

from ._console import ExitCode, fail
from ._sources import OwnFunctions, SourceError, is_source

__all__ = ["OwnChoice", "chosen_functions", "given_model", "own_functions"]

_MODEL_HINT = (
    "with no --model-url, --model names the model function that serves the policy (a Python file "
    "or module defining a Model, FILE:NAME for one of several, or an installed model's name); for a "
    "model at an endpoint, give its URL with --model-url"
)


@dataclass(frozen=True)
class OwnChoice:
    """What `--agent` and `--model` chose: names, and how workers load the user's own."""

    agent: str | None = None
    """The agent of rows without `agent_ref`, by name."""
    policy: str | None = None
    """The model function serving the policy, by name; `None`: the one `--model-url` calls for."""
    own: OwnFunctions = field(default_factory=OwnFunctions)


def own_functions(agent: str | None, model: str | None) -> OwnChoice:
    """Load what `--agent` and `--model` name (`model`: only where the command serves the
    policy itself, with no `--model-url`); `SourceError` (bad usage) if one cannot be
    loaded or is not an agent, a model."""
    own = OwnFunctions()
    try:
        agent_name = own.load(agent, Agent) if agent is not None and is_source(agent) else agent
    except (SourceError, FunctionClash) as exc:
        raise SourceError(f"--agent {agent}: {exc}") from None
    if agent_name is not None:
        _check_environment(agent_name, agent)
    if model is None:
        return OwnChoice(agent_name, None, own)
    if not is_source(model):
        if model not in MODELS:
            raise SourceError(f"--model {model}: no model function of that name; {_MODEL_HINT}")
        return OwnChoice(agent_name, model, own)
    try:
        return OwnChoice(agent_name, own.load(model, Model), own)
    except (SourceError, FunctionClash) as exc:
        raise SourceError(f"--model {model}: {exc}; {_MODEL_HINT}") from None


def _check_environment(agent: str, given: str | None) -> None:
    """`SourceError` if the agent from `given` drives an environment nothing defines."""
    spec = AGENTS.get(agent)
    if spec is None or spec.environment in ENVIRONMENTS:
        return
    raise SourceError(
        f"--agent {given}: the agent {agent} drives the environment {spec.environment!r}, which neither "
        "GymBus nor an installed package defines: import it in the agent's module (from my_env import "
        "ENVIRONMENT), or install its package"
    )


def given_model(
    ctx: typer.Context, model: str | None, model_url: str | None, nats_url: str | None
) -> str | None:
    """The `--model` that names a model function: given on the command line (POLICY_MODEL
    is the model at POLICY_BASE_URL, for whatever serves it), with no `--model-url`, where
    the command starts the policy's workers itself (no NATS_URL)."""
    source = ctx.get_parameter_source("model")
    on_command_line = source is not None and source.name == "COMMANDLINE"
    return model if on_command_line and not model_url and nats_url is None else None


def chosen_functions(
    ctx: typer.Context, agent: str | None, model: str | None, model_url: str | None, nats_url: str | None
) -> OwnChoice:
    """What `--agent` and `--model` chose on this command line (`own_functions`); exits
    (bad usage) on one that cannot be loaded."""
    try:
        return own_functions(agent, given_model(ctx, model, model_url, nats_url))
    except SourceError as exc:
        fail(str(exc), ExitCode.USAGE)
