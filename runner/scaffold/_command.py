"""`gym-runner new-environment`: the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gymbus.functions.registry import FunctionClash

from .._console import fail, say
from ._scaffold import write_package

__all__ = ["new_environment_command"]


def new_environment_command(
    name: Annotated[
        str, typer.Argument(help="The environment's name: lowercase letters, digits and underscores.")
    ],
    into: Annotated[Path, typer.Option("--into", help="The folder to write the package's folder in.")] = Path(
        "."
    ),
) -> None:
    """Write a new environment package, NAME/, ready to `pip install -e NAME`.

    It holds a working environment to change (a shopping list: two tools, per-session
    state, a verify) in NAME/NAME/environment.py, five example rows in data/example.jsonl,
    tests that call its functions and run `gym-runner check` on it, a README, and a
    pyproject.toml whose entry point (group `gymbus.functions`) lets every gym-runner
    command find NAME and its agent NAME_simple_agent by name once it is installed.
    See docs/own-environment.md.

    Example:

        gym-runner new-environment my_env
    """
    try:
        scaffold = write_package(name, into)
    except (ValueError, FileExistsError, FunctionClash) as exc:
        fail(str(exc))
    for path in scaffold.files:
        typer.echo(path)
    say(
        f"wrote {scaffold.root}; next:\n"
        f"  pip install -e {scaffold.root}\n"
        f"  cd {scaffold.root} && python -m pytest\n"
        "  gym-runner collect -i data/example.jsonl -o results/rollouts.jsonl"
    )
