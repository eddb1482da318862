"""`gym-runner collect`: the command, its report and its exit status."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gymbus.bus import nats_url_from_env
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, GymError

from .._console import ExitCode, err, fail, say
from .._input import UnknownAgent, open_input
from .._interrupts import Interrupts, interrupted_exit_code
from .._options import ModelApi, ModelKey, ModelNameOrFunction, ModelUrl, TokenCapture, model_options
from .._output import WriteFailed
from .._own import chosen_functions
from .._progress import ProgressView
from ._collect import CollectOptions, CollectResult, collect
from ._lock import OutputInUse
from ._plan import PlanChanged
from ._shared_bus import refused_on_shared_bus
from ._summary import agent_lines, exit_code, failure_lines, plural, result_line

__all__ = ["collect_command"]


TasksInput = Annotated[
    Path,
    typer.Option(
        "--input", "-i", help="Input JSONL: one task per line (NeMo Gym format); `-` reads it from a pipe."
    ),
]
RolloutsOutput = Annotated[
    Path, typer.Option("--output", "-o", help="Rollouts JSONL to write; sidecar files go beside it.")
]
AgentForRows = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        help="Agent for rows without `agent_ref`: a name, or a Python file or module defining "
        "your own (FILE[:NAME]).",
    ),
]
Limit = Annotated[int | None, typer.Option(help="Use only the first N input rows.", min=1)]
NumRepeats = Annotated[int, typer.Option(help="Rollouts per row (repeats are consecutive).", min=1)]
RolloutConcurrency = Annotated[int, typer.Option(help="Most rollouts in flight at once.", min=1)]
Resume = Annotated[bool, typer.Option(help="Keep rollouts already written; run only the missing ones.")]
Workers = Annotated[int, typer.Option(help="Worker processes to start (embedded server only).", min=1)]
RolloutTimeout = Annotated[
    float,
    typer.Option(help="Seconds a rollout may take from publishing; later it is dropped as a failure.", min=1),
]


def collect_command(
    ctx: typer.Context,
    input: TasksInput,
    output: RolloutsOutput,
    agent: AgentForRows = None,
    limit: Limit = None,
    num_repeats: NumRepeats = 1,
    concurrency: RolloutConcurrency = DEFAULT_LIMITS.collect_concurrency,
    resume: Resume = False,
    workers: Workers = DEFAULT_LIMITS.embedded_workers,
    rollout_timeout: RolloutTimeout = DEFAULT_TIMEOUTS.rollout,
    model_url: ModelUrl = None,
    model: ModelNameOrFunction = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
    token_capture: TokenCapture = True,
) -> None:
    """Collect rewarded rollouts for every row of an input JSONL.

    With no NATS_URL set, starts an embedded nats-server and the workers the dataset's agents need
    (environment, agent, and the offline policy unless a model URL is given), collects, and stops them.
    With NATS_URL set, uses the workers already serving there, and refuses the flags that only
    shape workers it starts (--workers, --model-url and the model's flags).

    An agent or a policy model of your own goes where a built-in goes: `--agent my_agent.py`
    (FILE[:NAME], or a module) runs the agent that file defines, over the environment it names;
    `--model my_model.py` (with no --model-url) serves the policy with the Model it defines.

    Example:

        gym-runner collect -i examples/example_single_tool_call.jsonl -o results/weather.jsonl \\
            --agent example_single_tool_call_simple_agent --num-repeats 4

    Exit status: **0** every planned rollout is in the rollouts file; **1** the command could not
    run or stopped on an error (unreachable NATS_URL, missing input, output in use by another run,
    disk full); **2** bad usage; **3** finished, but some rollouts or input rows are in the failures
    file; **4** finished with no rollout (all failed, every row was bad, or the input is empty);
    **130** / **143** interrupted by Ctrl-C / SIGTERM (`--resume` finishes the run).
    """
    nats_url = nats_url_from_env()
    chosen = chosen_functions(ctx, agent, model, model_url, nats_url)
    options = CollectOptions(
        input=input, output=output, agent=chosen.agent, policy=chosen.policy, own=chosen.own, limit=limit,
        num_repeats=num_repeats, concurrency=concurrency, resume=resume, workers=workers, nats_url=nats_url,
        model=model_options(model_url, model, model_api_key, model_api, token_capture) if model_url else None,
        timeouts=replace(DEFAULT_TIMEOUTS, rollout=rollout_timeout),
    )  # fmt: skip
    if refused := refused_on_shared_bus(ctx, options.nats_url, options.model):
        fail(refused, ExitCode.USAGE)
    _collect_and_exit(options)


def _collect_and_exit(options: CollectOptions) -> NoReturn:
    with ExitStack() as stack:
        source = open_input(stack, options.input, options.output.parent)
        result, interrupted_by = asyncio.run(
            _collect_until_interrupted(replace(options, input=source.path, input_name=source.name))
        )
    _report(result)
    if result.interrupted:
        raise typer.Exit(interrupted_exit_code(interrupted_by))
    raise typer.Exit(exit_code(result))


async def _collect_until_interrupted(options: CollectOptions) -> tuple[CollectResult, int | None]:
    """The result, and the signal that interrupted it (first: stop publishing, finish what is
    in flight; second: stop now)."""
    stop_publishing = asyncio.Event()
    view = ProgressView(err)
    interrupts = Interrupts(stop_publishing, "finishing the rollouts in flight", view.note)
    try:
        return await collect(options, view, stop_publishing), interrupts.signal
    except asyncio.CancelledError:
        view.stop()
        err.print("stopped; rollouts written so far are complete lines. Re-run with --resume to finish.")
        raise typer.Exit(interrupts.exit_code) from None
    except WriteFailed as exc:
        view.stop()
        fail(f"{exc}; the files are whole as they are: make room, then run the same command with --resume")
    except UnknownAgent as exc:
        view.stop()
        fail(str(exc), ExitCode.USAGE if exc.usage else ExitCode.ERROR)
    except (GymError, OSError, OutputInUse, PlanChanged) as exc:
        view.stop()
        fail(str(exc))


def _report(result: CollectResult) -> None:
    say(result_line(result))
    if result.failed:
        say(f"{plural(result.failed, 'failure')} by class:", style="yellow")
        for line in failure_lines(result):
            say(line)
    for line in agent_lines(result):
        say(line)
    if result.interrupted:
        say("interrupted: re-run the same command with --resume to finish", style="yellow")
    paths = result.paths
    for title, path in (("Rollouts", paths.rollouts), ("Failures", paths.failures),
                        ("Aggregate metrics", paths.metrics), ("Worker log", result.workers_log)):  # fmt: skip
        if path is not None and path.exists():
            say(f"{title}: {path}")
