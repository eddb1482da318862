"""`gym-runner front` and `gym-runner talk`: the commands."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gymbus.bus import nats_url_from_env
from gymbus.functions import Agent
from gymbus.functions.registry import AGENTS
from gymbus.schemas import GymError, output_text

from .._console import ExitCode, fail, say
from .._input import UnknownAgent, nearest
from .._options import ModelApi, ModelKey, ModelNameOrFunction, ModelUrl, model_options
from .._own import OwnChoice, chosen_functions
from ._front import DEFAULT_HEAD_PORT, FrontOptions, install_stop, run_front
from ._layout import Layout
from ._started import NEMO_GYM_ROOT, run_started_front
from ._talk import conversation_lines, talk_once

__all__ = ["front_command", "talk_command"]


FrontedFunctions = Annotated[
    list[str] | None,
    typer.Argument(
        help="Agents and environments to front (an environment alone: its `/verify`, `/seed_session` "
        "and tools); none: every agent and environment a live worker serves."
    ),
]
Host = Annotated[str, typer.Option(help="Address to listen on, and to give NeMo Gym's clients.")]
HeadPort = Annotated[int, typer.Option(help="The head server's port (NeMo Gym's default).", min=0)]
FromNemoGym = Annotated[
    bool,
    typer.Option(
        "--from-nemo-gym",
        help="Started by NeMo Gym from a config's `gymbus_front` server: serve what its config "
        "(NEMO_GYM_CONFIG_DICT) gives the front, at the ports it gave them.",
    ),
]
NemoGymRoot = Annotated[
    bool,
    typer.Option(
        "--nemo-gym-root",
        help="Print the folder holding GymBus's NeMo Gym servers and config, for "
        "NEMO_GYM_EXTRA_ROOTS, and exit.",
    ),
]
TalkAgent = Annotated[
    str,
    typer.Argument(
        help="The agent, as rows name it (`agent_ref.name`), or a Python file or module defining your own "
        "(FILE[:NAME])."
    ),
]
Prompt = Annotated[str, typer.Argument(help="What the user says.")]
SystemMessage = Annotated[str | None, typer.Option(help="A system message before it.")]


def front_command(
    agents: FrontedFunctions = None,
    host: Host = "127.0.0.1",
    port: HeadPort = DEFAULT_HEAD_PORT,
    from_nemo_gym: FromNemoGym = False,
    nemo_gym_root: NemoGymRoot = False,
) -> None:
    """Serve NeMo Gym's HTTP API in front of the agents and environments on the bus at
    NATS_URL, until Ctrl-C.

    NeMo Gym's own clients (`ng_collect_rollouts`, `RolloutCollectionHelper().run_examples`,
    `simple_agent/client.py`, a reward function that POSTs `/verify`) find the agents through
    the head server, as they find NeMo Gym's: each agent gets an environment server whose
    `/run` is a durable task on the agent's queue, so a worker killed mid-rollout costs a
    redelivery, not an error; each environment a resources server (`/seed_session`,
    `/verify`, tools); each model `/v1/responses`. Each server has a port of its own.

    What no live worker serves yet is waited for, up to three minutes, saying every 10 s
    what it waits for (Ctrl-C stops the wait); a misspelt name is refused at once, with
    the names it is close to. With none named, the front serves what is served when it
    starts.

    A trainer that starts NeMo Gym itself from its `config_paths` (NeMo RL, veRL's recipe)
    starts the front too: add `resources_servers/gymbus/configs/gymbus_front.yaml` (or your
    own copy) to its `config_paths` and export NEMO_GYM_EXTRA_ROOTS=$(gym-runner front
    --nemo-gym-root); see docs/nemo-gym-clients.md.

    Examples:

        gym-runner front example_single_tool_call_simple_agent --port 11000

        gym-runner front

        gym-runner front mcqa --port 11000

        gym-runner front --nemo-gym-root
    """
    if nemo_gym_root:
        typer.echo(str(NEMO_GYM_ROOT))
        raise typer.Exit()
    options = FrontOptions(agents=tuple(agents or ()), host=host, head_port=port)
    try:
        asyncio.run(_front_until_stopped(options, from_nemo_gym))
    except UnknownAgent as exc:
        fail(str(exc), ExitCode.USAGE)
    except (GymError, OSError, ValueError, KeyError) as exc:
        fail(str(exc))


async def _front_until_stopped(options: FrontOptions, from_nemo_gym: bool) -> None:
    stop = asyncio.Event()
    install_stop(stop)
    if from_nemo_gym:
        await run_started_front(stop)
    else:
        await run_front(options, stop, _say_ready)


def _say_ready(layout: Layout) -> None:
    say(f"head server: http://{layout.host}:{layout.head.port}", "bold")
    for server in layout.servers[1:]:
        say(f"  {server.name} ({server.kind}): http://{layout.host}:{server.port}")


def talk_command(
    ctx: typer.Context,
    agent: TalkAgent,
    prompt: Prompt,
    system: SystemMessage = None,
    model_url: ModelUrl = None,
    model: ModelNameOrFunction = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
) -> None:
    """Talk to an agent once: print the model's turns, its tool calls and their outputs, and
    the answer. No dataset, no reward: the agent's loop without a verdict.

    With NATS_URL set, the agent's loop runs here on that bus, with the environment and model
    served there (on a locked bus, with the agent's credentials). With none, starts an embedded
    nats-server and workers serving the agent's environment and its policy (the offline policy,
    unless --model-url or --model says otherwise), as `collect` does, and stops them.

    Examples:

        gym-runner talk example_single_tool_call_simple_agent "what's it like in sf?"

        gym-runner talk examples/shopping_list/shopping_list/environment.py "add milk, please"
    """
    url = nats_url_from_env()
    _refuse_model_flags_on_shared_bus(ctx, url)
    chosen = chosen_functions(ctx, agent, model, model_url, url)
    found = _agent_found(agent, chosen)
    options = model_options(model_url, model, model_api_key, model_api) if model_url and not url else None
    try:
        response = asyncio.run(talk_once(found, prompt, system, url, chosen, options))
    except GymError as exc:
        fail(str(exc))
    for who, what in conversation_lines(response):
        say(f"{who}: {what}")
    typer.echo(output_text(response))


def _refuse_model_flags_on_shared_bus(ctx: typer.Context, url: str | None) -> None:
    given = [flag for name, flag in (("model_url", "--model-url"), ("model", "--model"))
             if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"]  # fmt: skip
    if url is not None and given:
        fail(
            f"{', '.join(given)}: the policy talk serves itself, on the embedded default; on the bus at "
            "NATS_URL the agent calls the model served there: serve yours there, or unset NATS_URL",
            ExitCode.USAGE,
        )


def _agent_found(agent: str, chosen: OwnChoice) -> Agent:
    """The agent to talk to, built-in or of your own; exits (bad usage) on a name none defines."""
    found = AGENTS.get(chosen.agent or agent)
    if found is None:
        fail(
            f"{agent}: not an agent GymBus or an installed package defines{nearest(agent, AGENTS)}; give "
            "an agent of your own by its file: gym-runner talk path/to/my_agent.py[:NAME] PROMPT",
            ExitCode.USAGE,
        )
    return found
