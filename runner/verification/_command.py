"""`gym-runner verify`: the command and its report."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gymbus.bus import nats_url_from_env
from gymbus.functions import Agent
from gymbus.functions.registry import AGENTS, FunctionClash
from gymbus.schemas import DEFAULT_LIMITS, GymError

from .._console import ExitCode, err, fail, plural, say, show_list
from .._input import nearest, open_input
from .._interrupts import Interrupts, interrupted_exit_code
from .._options import ModelApi, ModelKey, ModelName, ModelUrl, TokenCapture, model_options
from .._progress import ProgressView
from .._sources import OwnFunctions, SourceError, is_source
from ._join import JoinTally
from ._verify import VerifyOptions, VerifyPaths, VerifyReport, verify_rollouts

__all__ = ["exit_code", "verify_command"]


RolloutsInput = Annotated[
    Path,
    typer.Option(
        "--input",
        "-i",
        help="Stored rollouts JSONL (GymBus's or NeMo Gym's output); `-` reads it from a pipe.",
    ),
]
RescoredOutput = Annotated[
    Path, typer.Option("--output", "-o", help="Rescored rollouts JSONL to write; sidecar files go beside it.")
]
AgentForRows = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        help="Agent for rows without `agent_ref`: a name, or a Python file or module defining your "
        "own (FILE[:NAME]; the environment it drives verifies).",
    ),
]
TaskInputs = Annotated[
    Path | None,
    typer.Option(
        help="The inputs the rollouts came from (NeMo Gym's `<stem>_materialized_inputs.jsonl`, or the "
        "task file): each rollout is joined with its input row (by `_ng_task_index` and `_ng_rollout_index`, "
        "else by prompt), whose task fields win, before it is verified."
    ),
]
VerifyConcurrency = Annotated[
    int, typer.Option(help="Most rows in flight at once (and held for writing in order).", min=1)
]


def verify_command(
    input: RolloutsInput,
    output: RescoredOutput,
    agent: AgentForRows = None,
    inputs: TaskInputs = None,
    concurrency: VerifyConcurrency = DEFAULT_LIMITS.verify_concurrency,
    model_url: ModelUrl = None,
    model: ModelName = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
    token_capture: TokenCapture = True,
) -> None:
    """Re-verify stored rollouts: send each row's `response` to its environment's verifier again,
    write the rows with the new `reward` (in input order), and report where it differs from the stored one.

    Writes `<stem>_disagreements.jsonl` (line, task, stored and new reward) and `<stem>_failures.jsonl`
    (rows that could not be verified, with file:line reasons) beside the output.
    With no NATS_URL set, starts an embedded nats-server, the environments the rows need and a judge model
    (served as `policy`: the offline policy unless a model URL is given), and stops them.
    With NATS_URL set, uses the workers already serving there.

    Example:

        gym-runner verify -i results/weather.jsonl -o results/weather_rescored.jsonl

        gym-runner verify -i nemo_gym_rollouts.jsonl -o rescored.jsonl --agent example_single_tool_call_simple_agent

        gym-runner verify -i results/mcqa.jsonl --inputs results/mcqa_materialized_inputs.jsonl -o rescored.jsonl

    Exit status: **0** every row was verified and its new reward agrees with the stored one (or it had
    none); **1** the command could not run or stopped on an error (unreachable NATS_URL, missing input);
    **2** bad usage; **3** finished, but some rows disagree or could not be verified (see the
    disagreements and failures files); **4** finished with no row verified (every row failed, or the
    input is empty); **130** / **143** interrupted by Ctrl-C / SIGTERM.
    """
    own = OwnFunctions()
    options = VerifyOptions(
        input=input, output=output, agent=_chosen_agent(agent, own), own=own, inputs=inputs,
        concurrency=concurrency, nats_url=nats_url_from_env(),
        model=model_options(model_url, model, model_api_key, model_api, token_capture) if model_url else None,
    )  # fmt: skip
    _check_paths(options)
    _verify_and_exit(options)


def _chosen_agent(agent: str | None, own: OwnFunctions) -> str | None:
    """The agent for rows without `agent_ref`, a file or module of your own loaded into `own`;
    exits on one that cannot load, or that the embedded bus has no environment for."""
    if agent is not None and is_source(agent):
        try:
            agent = own.load(agent, Agent)
        except (SourceError, FunctionClash) as exc:
            fail(f"--agent {agent}: {exc}", ExitCode.USAGE)
    if agent is not None and nats_url_from_env() is None and agent not in AGENTS:
        # The embedded default verifies with the built-in agents' environments only.
        fail(
            f"--agent {agent}: not an agent{nearest(agent, AGENTS) or ' with a built-in environment'}",
            ExitCode.USAGE,
        )
    return agent


def _check_paths(options: VerifyOptions) -> None:
    """Exit on a missing --inputs file, or on an output that would overwrite an input."""
    inputs, output = options.inputs, options.output
    if inputs is not None and not inputs.exists():
        fail(f"--inputs file not found: {inputs}")
    outputs = {path.resolve() for path in VerifyPaths.for_output(output).all()}
    if {options.input.resolve(), *([inputs.resolve()] if inputs else [])} & outputs:
        fail(f"--output {output} would overwrite an input file; choose another")


def _verify_and_exit(options: VerifyOptions) -> NoReturn:
    with ExitStack() as stack:
        source = open_input(stack, options.input, options.output.parent)
        report, interrupted_by = asyncio.run(
            _verify_until_interrupted(replace(options, input=source.path, input_name=source.name))
        )
    _report_verify(report)
    if report.interrupted:
        raise typer.Exit(interrupted_exit_code(interrupted_by))
    raise typer.Exit(exit_code(report))


def exit_code(report: VerifyReport) -> ExitCode:
    """The status of a verification that ran to its end (see the command's help)."""
    if not report.verified:
        return ExitCode.NONE_COLLECTED
    return ExitCode.SOME_FAILED if report.disagreed or report.failed else ExitCode.OK


async def _verify_until_interrupted(options: VerifyOptions) -> tuple[VerifyReport, int | None]:
    """The report, and the signal that interrupted it (first: send no more rows, write those
    in flight; second: stop now)."""
    stop = asyncio.Event()
    view = ProgressView(err, label="verifying")
    interrupts = Interrupts(stop, "writing the rows in flight", view.note)
    try:
        return await verify_rollouts(options, view, stop), interrupts.signal
    except asyncio.CancelledError:
        view.stop()
        err.print("stopped; the rows written so far are complete lines, in input order.")
        raise typer.Exit(interrupts.exit_code) from None
    except (GymError, OSError, ValueError) as exc:
        view.stop()
        fail(str(exc))


def _report_verify(report: VerifyReport) -> None:
    rate = report.rows / max(report.seconds, 1e-9)
    say(
        f"Re-verified {report.verified} of {plural(report.rows, 'row')} in {report.seconds:.1f} s ({rate:.1f} rows/s): "
        f"{report.agreed} agree with the stored reward, {report.disagreed} disagree"
        + (f", {report.unscored} had no stored reward" if report.unscored else "")
        + (f"; {report.failed} could not be verified" if report.failed else "")
    )
    if report.join is not None:
        _report_join(report.join)
    show_list(
        "Disagreements (stored → new reward)", [d.describe() for d in report.disagreements], report.disagreed
    )
    show_list("Could not be verified", report.failures, report.failed)
    if report.interrupted:
        err.print("[yellow]interrupted: the rows after the last one written were not verified[/yellow]")
    paths = report.paths
    for title, path in (("Rescored", paths.rescored), ("Disagreements", paths.disagreements),
                        ("Failures", paths.failures), ("Aggregate metrics", paths.metrics),
                        ("Worker log", paths.workers_log)):  # fmt: skip
        if path.exists():  # a file with no row to hold is never written
            say(f"{title}: {path}")


def _report_join(join: JoinTally) -> None:
    say(
        f"Joined with {join.inputs} ({plural(join.input_rows, 'input row')}): {join.by_key} by task and rollout index, "
        f"{join.by_prompt} by prompt, {join.unmatched} not matched (in the failures file)"
    )
    if join.skipped_lines:
        more = " ..." if join.skipped_lines > len(join.noted_lines) else ""
        lines = ", ".join(map(str, join.noted_lines)) + more
        say(
            f"  skipped {plural(join.skipped_lines, 'line')} of {join.inputs} that hold no task row: lines {lines}"
        )
