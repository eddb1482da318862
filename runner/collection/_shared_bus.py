"""Flags of `collect` that only the workers it starts could honour.

On the embedded default `collect` starts the workers its dataset needs, and `--workers`
and the policy model's flags shape them. With `NATS_URL` set it starts none: the workers
already serving there decide the model and their own number. There those flags would
change nothing, so a flag given on the command line is refused before anything starts,
never silently dropped (a user would believe the rows came from their model). The same
settings from the environment (`POLICY_BASE_URL`, ...) are left alone: in a shell set up
for a shared bus they are meant for the `serve` processes started from it.
"""

from __future__ import annotations

import typer

from gymbus.functions import ModelOptions
from gymbus.functions.registry import policy_adapter

__all__ = ["WORKER_FLAGS", "refused_on_shared_bus"]

WORKER_FLAGS = {
    "model_url": "--model-url",
    "model": "--model",
    "model_api_key": "--model-api-key",
    "model_api": "--model-api",
    "token_capture": "--token-capture",
    "workers": "--workers",
}
"""`collect`'s parameters that configure the workers it starts, by the flag that sets each."""


def refused_on_shared_bus(ctx: typer.Context, nats_url: str | None, model: ModelOptions | None) -> str | None:
    """Why the flags given on the command line of `ctx` cannot take effect on the bus at
    `nats_url` (the message of a usage error), or `None` when none was given or there is
    no `nats_url` (on the embedded default they take effect)."""
    given = [flag for name, flag in WORKER_FLAGS.items() if _source(ctx, name) == "COMMANDLINE"]
    if nats_url is None or not given:
        return None
    return (
        f"{', '.join(given)}: with NATS_URL set ({nats_url}) collect starts no workers, so "
        f"{'this flag' if len(given) == 1 else 'these flags'} would change nothing: the workers "
        f"serving that bus decide the model and their number. {'; '.join(_instead(given, nats_url, model))}; "
        f"or unset NATS_URL to have collect start its own workers with {'it' if len(given) == 1 else 'them'}"
    )


def _instead(given: list[str], nats_url: str, model: ModelOptions | None) -> list[str]:
    """What to run on the shared bus for each kind of flag given."""
    hints = []
    if any(flag != "--workers" for flag in given):
        url = f" --model-url {model.base_url}" if model is not None and model.base_url else ""
        name = f" --model {model.model}" if model is not None and model.model else ""
        hints.append(
            f"Serve the model there (`NATS_URL={nats_url} gym-runner serve {policy_adapter(model)}{url}{name}`)"
        )
    if "--workers" in given:
        hints.append(
            f"{'S' if not hints else 's'}tart more workers there (`gym-runner serve AGENT ENVIRONMENT --replicas N`)"
        )
    return hints


def _source(ctx: typer.Context, name: str) -> str:
    """Where the value of parameter `name` came from, by name: typer carries its own copy
    of click, whose `ParameterSource` is not `click.core.ParameterSource`."""
    source = ctx.get_parameter_source(name)
    return source.name if source is not None else "DEFAULT"
