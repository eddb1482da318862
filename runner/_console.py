"""What the commands print: to stderr, one line at a time, never wrapped (file:line
references stay whole for grep and editors); and the exit statuses scripts read."""

from __future__ import annotations

from enum import IntEnum
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

__all__ = ["LISTED", "ExitCode", "err", "fail", "plural", "say", "show_list"]


class ExitCode(IntEnum):
    """What `collect` and `verify` exit with when they ran to their end (an interrupted
    command exits 128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM)."""

    OK = 0
    """Everything asked for was done: every rollout collected, every row verified alike."""
    ERROR = 1
    """The command could not run, or stopped on an error."""
    USAGE = 2
    """Bad usage: an unknown option or value."""
    SOME_FAILED = 3
    """Finished, but some rows are in the failures file (or, for `verify`, disagree)."""
    NONE_COLLECTED = 4
    """Finished with nothing done: no rollout collected, no row verified."""


LISTED = 20
"""Items a report lists (disagreements, failures); the sidecar files hold them all."""

err = Console(stderr=True, soft_wrap=True)  # never wrapped: see the module docstring


def plural(count: int, noun: str) -> str:
    """`1 row`, `2 rows`, `1,000 rows`: a count and its noun, in the number it takes."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def say(line: str, style: str | None = None) -> None:
    """One line, never wrapped (file:line references stay whole for grep and editors)."""
    err.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


def show_list(title: str, lines: list[str], total: int) -> None:
    """A titled list of the first `LISTED` lines, and how many more there are."""
    if not total:
        return
    err.print(f"[yellow]{title}:[/yellow]")
    for line in lines:
        say(f"  {line}")
    if total > LISTED:
        err.print(f"  … and {total - LISTED} more")


def fail(message: str, status: int = ExitCode.ERROR) -> NoReturn:
    # Not markup (`[Errno 28]` is text), never wrapped (paths stay whole for grep and editors).
    err.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(status)
