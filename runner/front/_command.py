"""`gym-runner front` and `gym-runner talk`: the commands."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from gymbus.functions import AGENTS
from gymbus.schemas import GymError, output_text

from .._console import fail, say
from ._front import DEFAULT_HEAD_PORT, FrontOptions, install_stop, run_front
from ._layout import Layout
from ._started import NEMO_GYM_ROOT, run_started_front
from ._talk import conversation_lines, talk_once

__all__ = ["front_command", "talk_command"]


def front_command(
    agents: Annotated[
        list[str] | None, typer.Argument(help="Agents to front; none: every agent a live worker serves.")
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on, and to give NeMo Gym's clients.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="The head server's port (NeMo Gym's default).", min=0)
    ] = DEFAULT_HEAD_PORT,
    from_nemo_gym: Annotated[
        bool,
        typer.Option(
            "--from-nemo-gym",
            help="Started by NeMo Gym from a config's `gymbus_front` server: serve what its config "
            "(NEMO_GYM_CONFIG_DICT) gives the front, at the ports it gave them.",
        ),
    ] = False,
    nemo_gym_root: Annotated[
        bool,
        typer.Option(
            "--nemo-gym-root",
            help="Print the folder holding GymBus's NeMo Gym servers and config, for "
            "NEMO_GYM_EXTRA_ROOTS, and exit.",
        ),
    ] = False,
) -> None:
    """Serve NeMo Gym's HTTP API in front of the agents on the bus at NATS_URL, until Ctrl-C.

    NeMo Gym's own clients (`ng_collect_rollouts`, `RolloutCollectionHelper().run_examples`,
    `simple_agent/client.py`, a reward function that POSTs `/verify`) find the agents through
    the head server, as they find NeMo Gym's: each agent gets an environment server whose
    `/run` is a durable task on the agent's queue, so a worker killed mid-rollout costs a
    redelivery, not an error; each environment a resources server (`/seed_session`,
    `/verify`, tools); each model `/v1/responses`. Each server has a port of its own.

    A trainer that starts NeMo Gym itself from its `config_paths` (NeMo RL, veRL's recipe)
    starts the front too: add `resources_servers/gymbus/configs/gymbus_front.yaml` (or your
    own copy) to its `config_paths` and export NEMO_GYM_EXTRA_ROOTS=$(gym-runner front
    --nemo-gym-root); see docs/nemo-gym-clients.md.

    Examples:

        gym-runner front example_single_tool_call_simple_agent --port 11000

        gym-runner front

        gym-runner front --nemo-gym-root
    """
    if nemo_gym_root:
        typer.echo(str(NEMO_GYM_ROOT))
        raise typer.Exit()
    options = FrontOptions(agents=tuple(agents or ()), host=host, head_port=port)

    def ready(layout: Layout) -> None:
        say(f"head server: http://{layout.host}:{layout.head.port}", "bold")
        for server in layout.servers[1:]:
            say(f"  {server.name} ({server.kind}): http://{layout.host}:{server.port}")

    async def main() -> None:
        stop = asyncio.Event()
        install_stop(stop)
        if from_nemo_gym:
            await run_started_front(stop)
        else:
            await run_front(options, stop, ready)

    try:
        asyncio.run(main())
    except (GymError, OSError, ValueError, KeyError) as exc:
        fail(str(exc))


def talk_command(
    agent: Annotated[str, typer.Argument(help="The agent, as rows name it (`agent_ref.name`).")],
    prompt: Annotated[str, typer.Argument(help="What the user says.")],
    system: Annotated[str | None, typer.Option(help="A system message before it.")] = None,
) -> None:
    """Talk to an agent on the bus at NATS_URL once: print the model's turns, its tool calls
    and their outputs, and the answer. No dataset, no reward: the agent's loop without a verdict.

    Example:

        gym-runner talk example_single_tool_call_simple_agent "what's it like in sf?"
    """
    known = AGENTS.get(agent)
    if known is None:
        fail(f"{agent} is not one of GymBus's agents (known: {', '.join(sorted(AGENTS))})")
    try:
        response = asyncio.run(talk_once(known, prompt, system, None))
    except GymError as exc:
        fail(str(exc))
    for who, what in conversation_lines(response):
        say(f"{who}: {what}")
    typer.echo(output_text(response))
