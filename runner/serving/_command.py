"""`gym-runner serve`, `gym-runner status`, `gym-runner sync-adapters` and `gym-runner nemo-gym
install`: the commands."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gymbus.bus import QueueDepth, ServeOptions, ServiceStats, nats_url_from_env, open_bus
from gymbus.functions import ModelOptions
from gymbus.functions.nemo_gym import is_nemo_gym
from gymbus.functions.nemo_gym import prepare as prepare_nemo_gym
from gymbus.functions.registry import MODELS, REGISTRY, FunctionClash, names
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, GymError

from .._console import ExitCode, fail, say
from .._options import ModelApi, ModelKey, ModelName, ModelUrl, TokenCapture, model_options
from .._sources import SourceError, absolute, function_names
from ._adapters import sync_adapters
from ._serve import serve
from ._status import gather_status, render_status, status_json

__all__ = ["nemo_gym_install_command", "serve_command", "status_command", "sync_adapters_command"]


ServedFunctions = Annotated[
    list[str],
    typer.Argument(
        help="Functions to serve: environments, agents, models, by name; or a Python file or "
        "module path, for every function it defines."
    ),
]
Replicas = Annotated[int, typer.Option(help="Worker processes; they share each subject.", min=1)]
ServedModel = Annotated[
    str,
    typer.Option(
        help="Model name agents call, served by this command's model function (one per command). "
        "Several, comma-separated, serve it under each (`policy,judge_model`: it judges for NeMo Gym "
        "servers that name their judge so)."
    ),
]
AckWait = Annotated[
    float,
    typer.Option(
        help="Seconds without a heartbeat before a task of a dead agent worker goes to another.", min=1
    ),
]
AgentConcurrency = Annotated[
    int, typer.Option(help="Rollouts each agent worker process runs at once.", min=1)
]


def serve_command(
    functions: ServedFunctions,
    replicas: Replicas = 1,
    served_model: ServedModel = "policy",
    model_url: ModelUrl = None,
    model: ModelName = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
    token_capture: TokenCapture = True,
    ack_wait: AckWait = DEFAULT_TIMEOUTS.ack_wait,
    concurrency: AgentConcurrency = DEFAULT_LIMITS.agent_concurrency,
) -> None:
    """Serve functions until Ctrl-C or SIGTERM (in-flight work finishes first).

    Connects to NATS_URL; with none set, starts an embedded nats-server and prints its URL.

    A function is named as the built-ins are, or as an installed package declares it (an entry point in the
    group `gymbus.functions`). A Python file (`path/to/my_env.py`) or module (`my_pkg.my_env`) serves
    every Environment, Agent and Model it defines at module level, with the agents its environments
    declare: see docs/own-environment.md.

    `nemo-gym:<server>` hosts a NeMo Gym resources server unchanged (`<server>` of the nemo-gym package, 0.7.0
    or GYMBUS_NEMO_GYM_VERSION=0.4.0, `<server>/<config>`, or the path of your own server's directory): in
    its own virtual environment (built once; needs Python 3.13), started on a loopback port, served as the
    environment `<server>` with the agents its config declares: simple agents run by GymBus's, others
    (gymnasium_agent, tool_simulation_agent, ...) by NeMo Gym's own agent server, unchanged. Their judges
    and policy are models on the bus (`policy`, or the name the config gives: serve one under it with
    --served-model policy,judge_model). Which of the package's servers work, measured by
    scripts/nemo_gym_census.py: see docs/nemo-gym.md.

    Examples:

        gym-runner serve example_single_tool_call --replicas 2

        gym-runner serve example_single_tool_call example_single_tool_call_simple_agent offline

        gym-runner serve examples/shopping_list/shopping_list/environment.py offline

        gym-runner serve openai --model-url http://localhost:8000/v1 --model Qwen/Qwen3-4B --model-api chat

        gym-runner serve vllm --model-url http://gpu1:8000/v1,http://gpu2:8000/v1

        gym-runner serve nemo-gym:example_session_state_mgmt --replicas 2

        gym-runner serve nemo-gym:structured_outputs/structured_outputs_json offline
    """
    served = _served_functions(functions, served_model)
    endpoint = model_options(model_url, model, model_api_key, model_api, token_capture)
    options = _serve_options(functions, served, served_model, endpoint, concurrency, ack_wait)
    raise typer.Exit(_serve_or_fail(options, replicas))


def _serve_options(
    functions: list[str], served: list[str], served_model: str, endpoint: ModelOptions, concurrency: int,
    ack_wait: float,
) -> ServeOptions:  # fmt: skip
    """What each worker serves and how; exits when the model function served lacks what its
    endpoint needs."""
    if "openai" in served and not endpoint.model:
        fail("the openai model adapter needs a model name: --model NAME or POLICY_MODEL")
    if "openai" in served and endpoint.api == "vllm":
        fail("--model-api vllm is served by the vllm model function: gym-runner serve vllm ...")
    if "vllm" in served and not endpoint.base_url:
        fail("the vllm model function needs its servers: --model-url URL[,URL...] or POLICY_BASE_URL")
    return ServeOptions(
        # Paths, not the names they define: each worker process loads them itself.
        functions=tuple(absolute(function) for function in functions),
        model=endpoint,
        served_model=served_model,
        limits=replace(DEFAULT_LIMITS, agent_concurrency=concurrency),
        timeouts=replace(DEFAULT_TIMEOUTS, ack_wait=ack_wait),
    )


def _serve_or_fail(options: ServeOptions, replicas: int) -> int:
    try:
        return serve(options, replicas)
    except GymError as exc:
        fail(str(exc))


def _served_functions(functions: list[str], served_model: str) -> list[str]:
    """The function names `serve` was given, files and modules loaded; exits on an unknown
    name, a clash, or two models for one served name."""
    try:
        served = function_names(functions)
        known = names()
    except (SourceError, FunctionClash) as exc:
        fail(str(exc))
    unknown = [name for name in served if name not in known and not is_nemo_gym(name)]
    if unknown:
        fail(
            f"unknown function(s): {', '.join(unknown)}; known: {', '.join(known)}, "
            "NeMo Gym servers as nemo-gym:<server>, and Python files or modules that define functions"
        )
    _check_one_model(served, served_model)
    return served


def _check_one_model(served: list[str], served_model: str) -> None:
    """Refuse two models in one worker: each would be served under every name in
    `--served-model`, so calls to one name would go to either, mixed within a rollout."""
    models = [name for name in served if name in MODELS]
    if len(models) > 1:
        both = ", ".join(f"{name} ({REGISTRY.source(name)})" for name in models)
        fail(
            f"{len(models)} models would answer as {served_model}: {both}. One model per served name: "
            "serve each in its own gym-runner serve, with its own --served-model",
            ExitCode.USAGE,
        )


def status_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show every live function on the bus at NATS_URL: endpoints, request and error counts, latency,
    and the depth of each agent's task queue.

    Example:

        NATS_URL=nats://127.0.0.1:4222 gym-runner status
    """
    url = nats_url_from_env()
    if url is None:
        fail("NATS_URL is not set: status needs the bus your workers use (e.g. NATS_URL=nats://host:4222)")
    try:
        stats, queues = asyncio.run(_status(url))
    except GymError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(status_json(stats, queues), indent=2, default=str))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)  # piped: do not wrap subjects
        render_status(stats, queues, console)


async def _status(url: str) -> tuple[list[ServiceStats], list[QueueDepth]]:
    async with open_bus(url, name="gym-runner status", role="monitor") as bus:
        return await gather_status(bus)


def nemo_gym_install_command(
    servers: Annotated[
        list[str], typer.Argument(help="Servers: `<server>`, `<server>/<config>` or a server directory.")
    ],
) -> None:
    """Build (or find already built) the virtual environment of each NeMo Gym server and of
    the NeMo Gym agents its config declares, so `serve nemo-gym:<server>` starts at once. The
    release is GYMBUS_NEMO_GYM_VERSION (0.7.0, or 0.4.0); it needs Python 3.13 (0.4.0: 3.12+;
    GYMBUS_NEMO_GYM_PYTHON names one); environments go to GYMBUS_NEMO_GYM_HOME (default
    ~/.cache/gymbus/nemo-gym).

    Example:

        gym-runner nemo-gym install mcqa example_session_state_mgmt
    """
    for server in servers:
        started = time.monotonic()
        try:
            venv = prepare_nemo_gym(server)
        except GymError as exc:
            fail(str(exc))
        say(f"{server}: {venv} ({time.monotonic() - started:.1f} s)")


def sync_adapters_command(
    vllm_url: Annotated[
        str, typer.Option("--vllm-url", help="The vLLM server beside this process (its root or /v1 URL).")
    ],
    policy: Annotated[
        str, typer.Option(help="The name of the policy whose adapters it holds (the trainer's `policy`).")
    ] = "policy",
    adapter_dir: Annotated[
        Path | None,
        typer.Option(help="Where adapter files go, on the server's disk (default: a temporary directory)."),
    ] = None,
) -> None:
    """Keep a vLLM server's LoRA adapters in step with a policy under training, through the bus.

    Run one beside each vLLM server of the policy (same machine: vLLM reads adapters from
    its own disk), on the trainer's bus (NATS_URL). Each new version a trainer publishes
    (`gymbus.runner.BusRolloutWorker`) is fetched from the bus's object store, written
    under `--adapter-dir` and loaded with `/v1/load_lora_adapter`; versions the trainer
    retires are unloaded. A server started or restarted mid-run catches up at once. The
    server needs `--enable-lora --max-lora-rank R --max-loras N` (N at least the
    trainer's max_staleness + 2) and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`; with
    `VLLM_SERVER_DEV_MODE=1` it also tells the trainer those limits.

    Example:

        NATS_URL=nats://bus:4222 gym-runner sync-adapters --vllm-url http://127.0.0.1:8000
    """
    url = nats_url_from_env()
    if url is None:
        fail("NATS_URL is not set: sync-adapters needs the trainer's bus (e.g. NATS_URL=nats://host:4222)")
    try:
        raise typer.Exit(sync_adapters(url, vllm_url, policy, adapter_dir))
    except (GymError, ValueError) as exc:
        fail(str(exc))
