"""The `gym-runner` command line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

from gymbus.bus import QueueDepth, ServeOptions, ServiceStats, nats_url_from_env, open_bus, tune_gc
from gymbus.functions import ModelOptions, names
from gymbus.functions.nemo_gym import is_nemo_gym
from gymbus.functions.nemo_gym import prepare as prepare_nemo_gym
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, GymError

from ._check import CheckItem
from ._check_run import run_check, sample_row
from ._collect import CollectOptions, CollectResult, collect
from ._interrupts import Interrupts, interrupted_exit_code
from ._join import JoinTally
from ._lock import OutputInUse
from ._output import WriteFailed
from ._prepare import PrepareOptions, PrepareReport, prepare
from ._prepare_sources import HF_PREFIX, parse_source
from ._progress import ProgressView
from ._secure import secure_init
from ._serve import serve
from ._status import gather_status, render_status, status_json
from ._summary import agent_lines, exit_code, failure_lines, plural, result_line
from ._verify import LISTED, VerifyOptions, VerifyPaths, VerifyReport, verify_rollouts

__all__ = ["app", "main"]

VERSION = "0.1.0"

app = typer.Typer(
    name="gym-runner",
    help=(
        "Run reinforcement-learning environments for LLMs on a NATS bus, and collect rewarded rollouts "
        "from NeMo Gym-format JSONL datasets.\n\n"
        "With no NATS_URL set, commands start an embedded nats-server for you."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)
err = Console(stderr=True)
log = logging.getLogger("gymbus")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gym-runner {VERSION}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details.")] = False,
    nats_creds: Annotated[
        Path | None, typer.Option(envvar="NATS_CREDS", help="NATS credentials file (user JWT and nkey seed).")
    ] = None,
    nats_nkey: Annotated[
        Path | None,
        typer.Option(
            envvar="NATS_NKEY", help="File with an nkey seed (`gym-runner secure init` writes them)."
        ),
    ] = None,
    nats_user: Annotated[
        str | None,
        typer.Option(
            envvar="NATS_USER",
            help="NATS user; its password only from NATS_PASSWORD (as a token from NATS_TOKEN).",
        ),
    ] = None,
    nats_ca: Annotated[
        Path | None, typer.Option(envvar="NATS_CA", help="CA certificate of the NATS servers (turns on TLS).")
    ] = None,
    nats_cert: Annotated[
        Path | None, typer.Option(envvar="NATS_CERT", help="TLS client certificate.")
    ] = None,
    nats_key: Annotated[
        Path | None, typer.Option(envvar="NATS_KEY", help="TLS client certificate's key.")
    ] = None,
) -> None:
    _configure_logging(verbose)
    tune_gc()
    # The options are shorthands for the variables `BusAuth.from_env` reads, so the worker
    # processes a command starts inherit them. Secrets themselves (a password, a token)
    # come only from the environment: a command line is visible to every local user.
    given = {"NATS_CREDS": nats_creds, "NATS_NKEY": nats_nkey, "NATS_USER": nats_user,
             "NATS_CA": nats_ca, "NATS_CERT": nats_cert, "NATS_KEY": nats_key}  # fmt: skip
    os.environ.update({name: str(value) for name, value in given.items() if value is not None})


_PER_DOCUMENT = ("trafilatura", "courlan", "htmldate")
"""Libraries that log a warning or an error for every page they cannot use (`browse`); the
tool answers the model with what went wrong instead."""


def _configure_logging(verbose: bool) -> None:
    """GymBus's own loggers (`gymbus.*`) at INFO, DEBUG with `--verbose`; every library's
    at WARNING, whatever it is. Libraries log each call at INFO or DEBUG (the openai SDK,
    through httpx2, one line per model call with its endpoint's URL): in a worker serving
    thousands of calls a second that is most of its CPU, and a leak into its log."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err, show_path=False, show_time=err.is_terminal)],
    )
    logging.getLogger("gymbus").setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in _PER_DOCUMENT:
        logging.getLogger(name).setLevel(logging.CRITICAL)


ModelUrl = Annotated[
    str | None,
    typer.Option(
        "--model-url",
        envvar="POLICY_BASE_URL",
        help="OpenAI-compatible endpoint (for `--model-api vllm`, several, comma-separated); "
        "unset = offline scripted policy.",
    ),
]
ModelName = Annotated[
    str | None, typer.Option("--model", envvar="POLICY_MODEL", help="Model name at that endpoint.")
]
ModelKey = Annotated[
    str | None,
    typer.Option(
        "--model-api-key", envvar="POLICY_API_KEY", help="API key (prefer the env var).", show_default=False
    ),
]
ModelApi = Annotated[
    str,
    typer.Option(
        "--model-api",
        envvar="POLICY_API",
        help="`responses` (Responses API) or `chat` (Chat Completions) through the openai SDK; `vllm`: "
        "open models served by vLLM or SGLang, with token ids and logprobs for training.",
    ),
]
TokenCapture = Annotated[
    bool,
    typer.Option(
        envvar="POLICY_TOKEN_CAPTURE",
        help="With `--model-api vllm`: record each model call's token ids and logprobs in the rollouts.",
    ),
]


def _model_options(
    url: str | None, model: str | None, key: str | None, api: str, token_capture: bool = True
) -> ModelOptions:
    if api not in ("responses", "chat", "vllm"):
        raise typer.BadParameter("must be `responses`, `chat` or `vllm`", param_hint="--model-api")
    return ModelOptions(base_url=url, model=model, api_key=key, api=api, token_capture=token_capture)


@app.command("collect")
def collect_command(
    input: Annotated[
        Path, typer.Option("--input", "-i", help="Input JSONL: one task per line (NeMo Gym format).")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Rollouts JSONL to write; sidecar files go beside it.")
    ],
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Agent for rows without `agent_ref`.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Use only the first N input rows.", min=1)] = None,
    num_repeats: Annotated[int, typer.Option(help="Rollouts per row (repeats are consecutive).", min=1)] = 1,
    concurrency: Annotated[int, typer.Option(help="Most rollouts in flight at once.", min=1)] = 1024,
    resume: Annotated[
        bool, typer.Option(help="Keep rollouts already written; run only the missing ones.")
    ] = False,
    workers: Annotated[
        int, typer.Option(help="Worker processes to start (embedded server only).", min=1)
    ] = 2,
    rollout_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a rollout may take from publishing; later it is dropped as a failure.", min=1
        ),
    ] = DEFAULT_TIMEOUTS.rollout,
    model_url: ModelUrl = None,
    model: ModelName = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
    token_capture: TokenCapture = True,
) -> None:
    """Collect rewarded rollouts for every row of an input JSONL.

    With no NATS_URL set, starts an embedded nats-server and the workers the dataset's agents need
    (environment, agent, and the offline policy unless a model URL is given), collects, and stops them.
    With NATS_URL set, uses the workers already serving there.

    Example:

        gym-runner collect -i examples/example_single_tool_call.jsonl -o results/weather.jsonl \\
            --agent example_single_tool_call_simple_agent --num-repeats 4

    Exit status: **0** every planned rollout is in the rollouts file; **1** the command could not
    run or stopped on an error (unreachable NATS_URL, missing input, output in use by another run,
    disk full); **2** bad usage; **3** finished, but some rollouts or input rows are in the failures
    file; **4** finished with no rollout (all failed, every row was bad, or the input is empty);
    **130** / **143** interrupted by Ctrl-C / SIGTERM (`--resume` finishes the run).
    """
    options = CollectOptions(
        input=input, output=output, agent=agent, limit=limit, num_repeats=num_repeats, concurrency=concurrency,
        resume=resume, workers=workers, nats_url=nats_url_from_env(),
        model=_model_options(model_url, model, model_api_key, model_api, token_capture) if model_url else None,
        timeouts=replace(DEFAULT_TIMEOUTS, rollout=rollout_timeout),
    )  # fmt: skip
    if not input.exists():
        _fail(f"input file not found: {input}")
    result, interrupted_by = asyncio.run(_collect_until_interrupted(options))
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
        _fail(f"{exc}; the files are whole as they are: make room, then run the same command with --resume")
    except (GymError, OSError, OutputInUse) as exc:
        view.stop()
        _fail(str(exc))


def _report(result: CollectResult) -> None:
    _say(result_line(result))
    if result.failed:
        _say(f"{plural(result.failed, 'failure')} by class:", style="yellow")
        for line in failure_lines(result):
            _say(line)
    for line in agent_lines(result):
        _say(line)
    if result.interrupted:
        _say("interrupted: re-run the same command with --resume to finish", style="yellow")
    paths = result.paths
    for title, path in (("Rollouts", paths.rollouts), ("Failures", paths.failures),
                        ("Aggregate metrics", paths.metrics), ("Worker log", result.workers_log)):  # fmt: skip
        if path is not None and path.exists():
            _say(f"{title}: {path}")


@app.command("verify")
def verify_command(
    input: Annotated[
        Path, typer.Option("--input", "-i", help="Stored rollouts JSONL (GymBus's or NeMo Gym's output).")
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Rescored rollouts JSONL to write; sidecar files go beside it."),
    ],
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Agent for rows without `agent_ref`.")
    ] = None,
    inputs: Annotated[
        Path | None,
        typer.Option(
            help="The inputs the rollouts came from (NeMo Gym's `<stem>_materialized_inputs.jsonl`, or the "
            "task file): each rollout is joined with its input row (by `_ng_task_index` and `_ng_rollout_index`, "
            "else by prompt), whose task fields win, before it is verified."
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="Most rows in flight at once (and held for writing in order).", min=1)
    ] = 256,
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
    """
    if not input.exists():
        _fail(f"input file not found: {input}")
    if inputs is not None and not inputs.exists():
        _fail(f"--inputs file not found: {inputs}")
    outputs = {path.resolve() for path in VerifyPaths.for_output(output).all()}
    if {input.resolve(), *([inputs.resolve()] if inputs else [])} & outputs:
        _fail(f"--output {output} would overwrite an input file; choose another")
    options = VerifyOptions(
        input=input, output=output, agent=agent, inputs=inputs, concurrency=concurrency, nats_url=nats_url_from_env(),
        model=_model_options(model_url, model, model_api_key, model_api, token_capture) if model_url else None,
    )  # fmt: skip
    report, interrupted_by = asyncio.run(_verify_until_interrupted(options))
    _report_verify(report)
    if report.interrupted:
        raise typer.Exit(interrupted_exit_code(interrupted_by))


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
        _fail(str(exc))


def _report_verify(report: VerifyReport) -> None:
    rate = report.rows / max(report.seconds, 1e-9)
    _say(
        f"Re-verified {report.verified} of {report.rows} rows in {report.seconds:.1f} s ({rate:.1f} rows/s): "
        f"{report.agreed} agree with the stored reward, {report.disagreed} disagree"
        + (f", {report.unscored} had no stored reward" if report.unscored else "")
        + (f"; {report.failed} could not be verified" if report.failed else "")
    )
    if report.join is not None:
        _report_join(report.join)
    _list(
        "Disagreements (stored → new reward)", [d.describe() for d in report.disagreements], report.disagreed
    )
    _list("Could not be verified", report.failures, report.failed)
    if report.interrupted:
        err.print("[yellow]interrupted: the rows after the last one written were not verified[/yellow]")
    _say(f"Rescored: {report.paths.rescored}")
    _say(f"Disagreements: {report.paths.disagreements}")
    _say(f"Failures: {report.paths.failures}")
    _say(f"Aggregate metrics: {report.paths.metrics}")


def _report_join(join: JoinTally) -> None:
    _say(
        f"Joined with {join.inputs} ({join.input_rows} input rows): {join.by_key} by task and rollout index, "
        f"{join.by_prompt} by prompt, {join.unmatched} not matched (in the failures file)"
    )
    if join.skipped_lines:
        more = " ..." if join.skipped_lines > len(join.noted_lines) else ""
        lines = ", ".join(map(str, join.noted_lines)) + more
        _say(f"  {join.skipped_lines} lines of {join.inputs} are not task rows, skipped: lines {lines}")


def _say(line: str, style: str | None = None) -> None:
    """One line, never wrapped (file:line references stay whole for grep and editors)."""
    err.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


def _list(title: str, lines: list[str], total: int) -> None:
    """A titled list of the first `LISTED` lines, and how many more there are."""
    if not total:
        return
    err.print(f"[yellow]{title}:[/yellow]")
    for line in lines:
        _say(f"  {line}")
    if total > LISTED:
        err.print(f"  … and {total - LISTED} more")


@app.command("prepare")
def prepare_command(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(
            help="JSONL datasets (NeMo Gym rows), each `PATH` or `PATH=AGENT` (the agent for its rows "
            "without `agent_ref`).",
            show_default=False,
        ),
    ] = None,
    output_dir: Annotated[
        Path,
        typer.Option(
            "--output-dir", "-o", help="Directory to write train.jsonl, validation.jsonl and their metrics."
        ),
    ] = Path("prepared"),
    hf: Annotated[
        list[str],
        typer.Option(
            "--hf",
            help="A Hugging Face dataset, `REPO[:SPLIT][=AGENT]` (split `train` by default), read with the "
            "`datasets` library (pip install 'gymbus[train]'); repeatable.",
        ),
    ] = [],  # noqa: B006
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Agent for rows without `agent_ref` (all sources).")
    ] = None,
    balance: Annotated[
        bool,
        typer.Option(help="Take as many rows from each source as the smallest one has (a random sample)."),
    ] = False,
    shuffle: Annotated[bool, typer.Option(help="Shuffle the blended rows (with --seed).")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the shuffle, the balancing sample and the split.")] = 0,
    validation_fraction: Annotated[
        float | None,
        typer.Option(help="Hold out this fraction of the rows as validation.jsonl.", min=0.0, max=1.0),
    ] = None,
    validation_count: Annotated[
        int | None, typer.Option(help="Hold out this many rows as validation.jsonl.", min=0)
    ] = None,
) -> None:
    """Validate datasets and prepare them for `collect` or training, as NeMo Gym's `ng_prepare_data`
    (`gym dataset collate`) does: every row is checked as `collect` checks it, and every bad one is
    reported as file:line: field and left out (the exit status is then 1); `agent_ref` is stamped on
    rows without one; several datasets are blended (`--balance`: to equal size) and shuffled with a
    seed; a validation split is held out; and NeMo Gym's dataset metrics (`<split>_metrics.json`:
    number of examples, tools, turns, JSON-dumped words, temperature, and a summary of every other
    field) are written beside each file. When several datasets are blended, their rows'
    `_ng_task_index` / `_ng_rollout_index` are removed (each dataset numbered its tasks from 0).

    Writes OUTPUT_DIR/train.jsonl, train_metrics.json, validation.jsonl, validation_metrics.json and
    bad_rows.txt (every bad row).

    Examples:

        gym-runner prepare examples/mcqa.jsonl -o prepared/mcqa

        gym-runner prepare examples/mcqa.jsonl examples/example_multi_step.jsonl --balance --seed 7 \\
            --validation-fraction 0.1 -o prepared/blend

        gym-runner prepare raw.jsonl=mcqa_simple_agent --hf nvidia/Nemotron-RL-knowledge-mcqa:train=mcqa_simple_agent \\
            --validation-count 500 -o prepared/mcqa
    """
    if validation_fraction is not None and validation_count is not None:
        _fail("give --validation-fraction or --validation-count, not both")
    specs = [*(inputs or []), *(f"{HF_PREFIX}{one}" for one in hf)]
    if not specs:
        _fail("name at least one dataset: a JSONL path or --hf REPO[:SPLIT]")
    try:
        sources = tuple(parse_source(spec, agent) for spec in specs)
        options = PrepareOptions(
            sources=sources, output_dir=output_dir, seed=seed, shuffle=shuffle, balance=balance,
            validation_fraction=validation_fraction, validation_count=validation_count,
        )  # fmt: skip
        report = prepare(options)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    _report_prepare(report)
    if report.bad:
        raise typer.Exit(1)


def _report_prepare(report: PrepareReport) -> None:
    for source in report.sources:
        _say(f"{source.name}: {source.good} good rows, {source.bad} bad; {source.used} used")
    if report.bad:
        err.print(f"[yellow]Bad rows, left out ({report.bad}):[/yellow]")
        for line in report.bad_listed:
            _say(f"  {line}")
        if report.bad > len(report.bad_listed):
            _say(f"  ... and {report.bad - len(report.bad_listed)} more")
        _say(f"Every bad row: {report.bad_rows}")
    if report.stamped:
        _say(f"Stamped agent_ref on {report.stamped} rows")
    if report.renumbered:
        _say(f"Removed _ng_task_index/_ng_rollout_index from {report.renumbered} blended rows")
    _say(f"Train: {report.train} ({report.train_rows} rows; metrics {report.metrics_of(report.train)})")
    if report.validation_rows:
        metrics = report.metrics_of(report.validation)
        _say(f"Validation: {report.validation} ({report.validation_rows} rows; metrics {metrics})")


@app.command("check")
def check_command(
    env: Annotated[str, typer.Argument(help="The environment to check, by its name on the bus.")],
    input: Annotated[
        Path | None,
        typer.Option(
            "--input", "-i", help="A JSONL of task rows for the environment; its first row is the sample."
        ),
    ] = None,
    line: Annotated[
        int | None, typer.Option(help="Take the sample row at this line of --input.", min=1)
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds each call (seed, a tool, verify) may take.", min=0.1)
    ] = DEFAULT_TIMEOUTS.check,
) -> None:
    """Check that an environment keeps the protocol, for its author: that it answers `$SRV.PING`
    and lists its subjects, seeds a session with a sample row, answers each declared tool called
    with arguments built from the tool's JSON Schema, and verifies a sample response with a
    numeric `reward`. Prints each item as OK or FAILED with the reason; exits with 1 if any failed.

    The sample row is the --input row, or one built from the environment's request schemas. A
    built-in environment declares its tools; another one (served by any process on the bus at
    NATS_URL) is checked against the tools its --input row offers the model and those its service lists.
    With no NATS_URL set, starts an embedded nats-server and a worker serving ENV (and the offline
    policy, for judges), and stops them. On a locked bus, run it with the credentials of an agent of ENV.

    Examples:

        gym-runner check example_single_tool_call

        gym-runner check mcqa --input examples/mcqa.jsonl --line 3

        NATS_URL=nats://host:4222 gym-runner check my_env --input my_env_tasks.jsonl
    """
    if line is not None and input is None:
        _fail("--line needs --input")
    timeouts = replace(DEFAULT_TIMEOUTS, check=timeout)
    try:
        row = asyncio.run(sample_row(input, line)) if input is not None else None
        items = asyncio.run(run_check(env, row, nats_url_from_env(), timeouts))
    except (GymError, OSError, ValueError) as exc:
        _fail(str(exc))
    _report_check(env, items)


def _report_check(env: str, items: list[CheckItem]) -> None:
    for item in items:
        typer.echo(item.describe())
    failed = sum(not item.ok for item in items)
    if failed:
        _say(f"{env}: {failed} of {len(items)} checks FAILED")
        raise typer.Exit(1)
    _say(f"{env}: all {len(items)} checks passed")


@app.command("serve")
def serve_command(
    functions: Annotated[list[str], typer.Argument(help="Functions to serve: environments, agents, models.")],
    replicas: Annotated[int, typer.Option(help="Worker processes; they share each subject.", min=1)] = 1,
    served_model: Annotated[
        str, typer.Option(help="Model name agents call; a model function serves it.")
    ] = "policy",
    model_url: ModelUrl = None,
    model: ModelName = None,
    model_api_key: ModelKey = None,
    model_api: ModelApi = "responses",
    token_capture: TokenCapture = True,
    ack_wait: Annotated[
        float,
        typer.Option(
            help="Seconds without a heartbeat before a task of a dead agent worker goes to another.", min=1
        ),
    ] = DEFAULT_TIMEOUTS.ack_wait,
    concurrency: Annotated[
        int, typer.Option(help="Rollouts each agent worker process runs at once.", min=1)
    ] = DEFAULT_LIMITS.agent_concurrency,
) -> None:
    """Serve functions until Ctrl-C or SIGTERM (in-flight work finishes first).

    Connects to NATS_URL; with none set, starts an embedded nats-server and prints its URL.

    `nemo-gym:<server>` hosts a NeMo Gym resources server unchanged (`<server>` of the
    nemo-gym 0.4.0 package, `<server>/<config>`, or the path of your own server's
    directory): in its own virtual environment (built once; needs Python 3.12+), started on
    a loopback port, served as the environment `<server>` with the simple agents its
    config declares. Works: servers whose tools and verify run locally (about 33 of the
    package's 95; 20 re-verify NeMo Gym's own example rollouts with its stored rewards);
    their judges are GymBus models (`policy`, or the name the config gives). Need keys:
    web search and servers with their own hosted judge endpoint (about 20). Need containers,
    sandbox services or GPUs (10). Driven by agents GymBus does not run (gymnasium,
    tool-simulation, ...: 19). Some download data at start-up (they need the internet).
    See the README's NeMo Gym section.

    Examples:

        gym-runner serve example_single_tool_call --replicas 2

        gym-runner serve example_single_tool_call example_single_tool_call_simple_agent offline

        gym-runner serve openai --model-url http://localhost:8000/v1 --model Qwen/Qwen3-4B --model-api chat

        gym-runner serve vllm --model-url http://gpu1:8000/v1,http://gpu2:8000/v1

        gym-runner serve nemo-gym:example_session_state_mgmt --replicas 2

        gym-runner serve nemo-gym:structured_outputs/structured_outputs_json offline
    """
    known = names()
    unknown = [name for name in functions if name not in known and not is_nemo_gym(name)]
    if unknown:
        _fail(
            f"unknown function(s): {', '.join(unknown)}; known: {', '.join(known)}, "
            "and NeMo Gym servers as nemo-gym:<server>"
        )
    options = ServeOptions(
        functions=tuple(functions),
        model=_model_options(model_url, model, model_api_key, model_api, token_capture),
        served_model=served_model,
        limits=replace(DEFAULT_LIMITS, agent_concurrency=concurrency),
        timeouts=replace(DEFAULT_TIMEOUTS, ack_wait=ack_wait),
    )
    if "openai" in functions and not options.model.model:
        _fail("the openai model adapter needs a model name: --model NAME or POLICY_MODEL")
    if "openai" in functions and options.model.api == "vllm":
        _fail("--model-api vllm is served by the vllm model function: gym-runner serve vllm ...")
    if "vllm" in functions and not options.model.base_url:
        _fail("the vllm model function needs its servers: --model-url URL[,URL...] or POLICY_BASE_URL")
    try:
        raise typer.Exit(serve(options, replicas))
    except GymError as exc:
        _fail(str(exc))


@app.command("status")
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
        _fail("NATS_URL is not set: status needs the bus your workers use (e.g. NATS_URL=nats://host:4222)")
    try:
        stats, queues = asyncio.run(_status(url))
    except GymError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(status_json(stats, queues), indent=2, default=str))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)  # piped: do not wrap subjects
        render_status(stats, queues, console)


async def _status(url: str) -> tuple[list[ServiceStats], list[QueueDepth]]:
    async with open_bus(url, name="gym-runner status", role="monitor") as bus:
        return await gather_status(bus.nc)


@app.command("view")
def view_command(
    rollouts: Annotated[
        Path, typer.Argument(help="Rollouts JSONL (GymBus's or NeMo Gym's output, or a failures file).")
    ],
    port: Annotated[
        int, typer.Option(help="Port on 127.0.0.1 to serve the page on (0: a free one).", min=0, max=65535)
    ] = 0,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Write the viewer as one self-contained HTML file instead of serving it."
        ),
    ] = None,
) -> None:
    """Browse rollouts: a list with reward, agent, task and rollout index, turns and failure class,
    filters, a reward histogram per agent, and each rollout as a conversation (messages, reasoning,
    tool calls with their arguments and outputs, simulated users, the verifier's fields, token usage
    and token ids).

    Serves the page on 127.0.0.1 and prints its URL; Ctrl-C stops it. The file is indexed by byte
    offsets (never loaded whole) and the page fetches one page of the list and one rollout at a time,
    so files of 100k rows open quickly. Its failures sidecar (`<stem>_failures.jsonl`) is shown too.
    Lines that hold no row (truncated, not JSON) are skipped and named.

    Examples:

        gym-runner view results/weather.jsonl

        gym-runner view results/weather.jsonl --html weather.html
    """
    if not rollouts.is_file():
        _fail(f"rollouts file not found: {rollouts}")
    from ._view import PageTooLarge, view  # here: no other command loads the web server

    try:
        view(rollouts, port, html, _say)
    except (PageTooLarge, OSError) as exc:
        _fail(str(exc))


nemo_gym_app = typer.Typer(help="NeMo Gym's resources servers, hosted unchanged (`serve nemo-gym:<server>`).")
app.add_typer(nemo_gym_app, name="nemo-gym")


@nemo_gym_app.command("install")
def nemo_gym_install_command(
    servers: Annotated[
        list[str], typer.Argument(help="Servers: `<server>`, `<server>/<config>` or a server directory.")
    ],
) -> None:
    """Build (or find already built) the virtual environment of each NeMo Gym server, so
    `serve nemo-gym:<server>` starts at once. Needs Python 3.12+ (GYMBUS_NEMO_GYM_PYTHON names
    one); environments go to GYMBUS_NEMO_GYM_HOME (default ~/.cache/gymbus/nemo-gym).

    Example:

        gym-runner nemo-gym install mcqa example_session_state_mgmt
    """
    for server in servers:
        started = time.monotonic()
        try:
            venv = prepare_nemo_gym(server)
        except GymError as exc:
            _fail(str(exc))
        _say(f"{server}: {venv} ({time.monotonic() - started:.1f} s)")


secure_app = typer.Typer(help="Lock a shared bus: nats-server configuration and per-role credentials.")
app.add_typer(secure_app, name="secure")


@secure_app.command("init")
def secure_init_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory to write (must not hold a configuration).")
    ],
    env: Annotated[list[str], typer.Option("--env", "-e", help="An environment to serve (repeatable).")] = [],  # noqa: B006
    agent: Annotated[
        list[str],
        typer.Option("--agent", "-a", help="An agent to run (repeatable); its environment is added."),
    ] = [],  # noqa: B006
    model: Annotated[
        list[str],
        typer.Option("--model", "-m", help="A model name served on the bus (repeatable), e.g. policy."),
    ] = [],  # noqa: B006
    nemo_gym: Annotated[
        list[str],
        typer.Option(
            "--nemo-gym",
            help="A NeMo Gym server to host (repeatable), as `serve nemo-gym:<server>` names it; "
            "its role covers its environment and its config's agents.",
        ),
    ] = [],  # noqa: B006
    listen: Annotated[str, typer.Option(help="The server's client address.")] = "0.0.0.0:4222",
    tls_cert: Annotated[Path | None, typer.Option(help="The server's TLS certificate.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Its private key.")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(help="CA of client certificates: with it, clients must present one.")
    ] = None,
    operator: Annotated[
        bool,
        typer.Option(
            "--operator",
            help="Users of an operator-mode server (JWTs, a .creds file per role) instead of nkeys; "
            "needs node and the npm package the error names.",
        ),
    ] = False,
) -> None:
    """Write a nats-server configuration whose users are GymBus's roles, each allowed only
    the subjects it needs, and one credentials file (mode 0600) per role: an nkey seed, or
    with --operator a .creds file (the roles as users of an operator's account).

    Roles: runner, producer, monitor, admin, agent-<agent>, env-<env>, model-<model>,
    nemo-gym-<server>. Every agent of a named environment, and every model a named agent or
    server calls, is included.

    Example:

        gym-runner secure init --env example_single_tool_call --model policy --out bus-secrets

        nats-server -c bus-secrets/nats.conf

        NATS_URL=nats://host:4222 NATS_NKEY=bus-secrets/credentials/runner.nk gym-runner collect ...
    """
    if not (env or agent or nemo_gym):
        _fail("name at least one --env, --agent or --nemo-gym")
    if bool(tls_cert) != bool(tls_key):
        _fail("--tls-cert and --tls-key go together")
    tls = (tls_cert, tls_key, tls_ca) if tls_cert and tls_key else None
    try:
        layout = secure_init(
            out, env, agent, model, listen=listen, tls=tls, operator=operator, nemo_gym=nemo_gym
        )
    except (ValueError, FileExistsError, RuntimeError) as exc:
        _fail(str(exc))
    _say(f"Server configuration: {layout.config}   (nats-server -c {layout.config})")
    if layout.helm_values is not None:
        _say(f"Helm chart values: {layout.helm_values}")
    variable = "NATS_CREDS" if operator else "NATS_NKEY"
    _say(f"Credentials (mode 0600; give each process its own with {variable}=<file>):")
    for role, path in layout.credentials.items():
        _say(f"  {role:<40} {path}")


def _fail(message: str) -> NoReturn:
    # Not markup (`[Errno 28]` is text), never wrapped (paths stay whole for grep and editors).
    err.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(1)


def main() -> None:
    app()
