"""`gym-runner prepare`: the command and its report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._console import err, fail, plural, say
from ._prepare import PrepareOptions, PrepareReport, prepare
from ._sources import HF_PREFIX, Source, parse_source

__all__ = ["prepare_command"]


Datasets = Annotated[
    list[str] | None,
    typer.Argument(
        help="JSONL datasets (NeMo Gym rows), each `PATH` or `PATH=AGENT` (the agent for its rows "
        "without `agent_ref`).",
        show_default=False,
    ),
]
OutputDir = Annotated[
    Path,
    typer.Option(
        "--output-dir", "-o", help="Directory to write train.jsonl, validation.jsonl and their metrics."
    ),
]
HuggingFaceDatasets = Annotated[
    list[str],
    typer.Option(
        "--hf",
        help="A Hugging Face dataset, `REPO[:SPLIT][=AGENT]` (split `train` by default), read with the "
        "`datasets` library (pip install 'gymbus[train]'); repeatable.",
    ),
]
AgentForRows = Annotated[
    str | None, typer.Option("--agent", "-a", help="Agent for rows without `agent_ref` (all sources).")
]
Balance = Annotated[
    bool, typer.Option(help="Take as many rows from each source as the smallest one has (a random sample).")
]
Shuffle = Annotated[bool, typer.Option(help="Shuffle the blended rows (with --seed).")]
Seed = Annotated[int, typer.Option(help="Seed of the shuffle, the balancing sample and the split.")]
ValidationFraction = Annotated[
    float | None,
    typer.Option(help="Hold out this fraction of the rows as validation.jsonl.", min=0.0, max=1.0),
]
ValidationCount = Annotated[
    int | None, typer.Option(help="Hold out this many rows as validation.jsonl.", min=0)
]


def prepare_command(
    inputs: Datasets = None,
    output_dir: OutputDir = Path("prepared"),
    hf: HuggingFaceDatasets = [],  # noqa: B006
    agent: AgentForRows = None,
    balance: Balance = False,
    shuffle: Shuffle = True,
    seed: Seed = 0,
    validation_fraction: ValidationFraction = None,
    validation_count: ValidationCount = None,
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
    bad_rows.txt (every bad row, when there is one).

    Examples:

        gym-runner prepare examples/mcqa.jsonl --agent mcqa_simple_agent -o prepared/mcqa

        gym-runner prepare examples/mcqa.jsonl=mcqa_simple_agent \\
            examples/example_multi_step.jsonl=example_multi_step_simple_agent --balance --seed 7 \\
            --validation-fraction 0.1 -o prepared/blend

    From the Hugging Face Hub (needs `pip install 'gymbus[train]'` and the network):

        gym-runner prepare --hf nvidia/Nemotron-RL-knowledge-mcqa:train=mcqa_simple_agent \\
            --validation-count 500 -o prepared/mcqa
    """
    if validation_fraction is not None and validation_count is not None:
        fail("give --validation-fraction or --validation-count, not both")
    options = PrepareOptions(
        sources=_sources(inputs, hf, agent), output_dir=output_dir, seed=seed, shuffle=shuffle,
        balance=balance, validation_fraction=validation_fraction, validation_count=validation_count,
    )  # fmt: skip
    report = _prepare_or_fail(options)
    _report_prepare(report)
    if report.bad:
        raise typer.Exit(1)


def _sources(inputs: list[str] | None, hf: list[str], agent: str | None) -> tuple[Source, ...]:
    """The datasets named by path and by `--hf`, in that order; exits when there is none, or
    on one that does not parse."""
    specs = [*(inputs or []), *(f"{HF_PREFIX}{one}" for one in hf)]
    if not specs:
        fail("name at least one dataset: a JSONL path or --hf REPO[:SPLIT]")
    try:
        return tuple(parse_source(spec, agent) for spec in specs)
    except (ValueError, OSError) as exc:
        fail(str(exc))


def _prepare_or_fail(options: PrepareOptions) -> PrepareReport:
    try:
        return prepare(options)
    except (ValueError, OSError) as exc:
        fail(str(exc))


def _report_prepare(report: PrepareReport) -> None:
    for source in report.sources:
        say(f"{source.name}: {source.good} good rows, {source.bad} bad; {source.used} used")
    if report.bad:
        err.print(f"[yellow]Bad rows, left out ({report.bad}):[/yellow]")
        for line in report.bad_listed:
            say(f"  {line}")
        if report.bad > len(report.bad_listed):
            say(f"  ... and {report.bad - len(report.bad_listed)} more")
        say(f"Every bad row: {report.bad_rows}")
    if report.stamped:
        say(f"Stamped agent_ref on {plural(report.stamped, 'row')}")
    if report.renumbered:
        say(f"Removed _ng_task_index/_ng_rollout_index from {plural(report.renumbered, 'blended row')}")
    say(
        f"Train: {report.train} ({plural(report.train_rows, 'row')}; metrics {report.metrics_of(report.train)})"
    )
    if report.validation_rows:
        metrics = report.metrics_of(report.validation)
        say(f"Validation: {report.validation} ({plural(report.validation_rows, 'row')}; metrics {metrics})")
