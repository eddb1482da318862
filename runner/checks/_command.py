"""`gym-runner check`: the command and its report."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from gymbus.bus import nats_url_from_env
from gymbus.schemas import DEFAULT_TIMEOUTS, GymError

from .._console import fail, say
from ._check import CheckItem
from ._run import run_check, sample_row

__all__ = ["check_command"]


def check_command(
    env: Annotated[
        str,
        typer.Argument(help="The environment to check: its name, or the Python file or module defining it."),
    ],
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

    ENV is a name (built in, or installed: an entry point in the group `gymbus.functions`) or a
    Python file or module that defines one environment. The sample row is the --input row, or one
    built from the environment's request schemas. A built-in, installed or given environment
    declares its tools; another one (served by any process on the bus at NATS_URL) is checked
    against the tools its --input row offers the model and those its service lists.
    With no NATS_URL set, starts an embedded nats-server and a worker serving ENV (and the offline
    policy, for judges), and stops them. On a locked bus, run it with the credentials of an agent of ENV.

    Examples:

        gym-runner check example_single_tool_call

        gym-runner check mcqa --input examples/mcqa.jsonl --line 3

        gym-runner check examples/shopping_list/shopping_list/environment.py

        NATS_URL=nats://host:4222 gym-runner check my_env --input my_env_tasks.jsonl
    """
    if line is not None and input is None:
        fail("--line needs --input")
    timeouts = replace(DEFAULT_TIMEOUTS, check=timeout)
    try:
        row = asyncio.run(sample_row(input, line)) if input is not None else None
        items = asyncio.run(run_check(env, row, nats_url_from_env(), timeouts))
    except (GymError, OSError, ValueError) as exc:
        fail(str(exc))
    _report_check(env, items)


def _report_check(env: str, items: list[CheckItem]) -> None:
    for item in items:
        typer.echo(item.describe())
    failed = sum(not item.ok for item in items)
    if failed:
        say(f"{env}: {failed} of {len(items)} checks FAILED")
        raise typer.Exit(1)
    say(f"{env}: all {len(items)} checks passed")
