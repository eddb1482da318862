"""The `gym-runner` command line: the app, its global options, and each command from its room.

    collect          collection/_command.py
    verify           verification/_command.py
    prepare          preparation/_command.py
    check            checks/_command.py
    serve, status    serving/_command.py     (and `sync-adapters`, `nemo-gym install`)
    front, talk      front/_command.py
    view             viewer/_command.py
    secure init      security/_command.py
    new-environment  scaffold/_command.py

A process loads only the room of the command it runs (`main` builds the app for it): a
worker process (`serve`) never imports the viewer, `prepare` or `secure`. `app`, the
whole command line, is built when first asked for (`--help`, tests).
"""

from __future__ import annotations

import logging
import os
import sys
from importlib import import_module
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.rich_utils
from rich.logging import RichHandler

from gymbus.bus import tune_gc

from ._console import err

__all__ = ["app", "main"]  # noqa: F822 - `app` is built on first access (`__getattr__`)

VERSION = "0.1.0"

_COMMANDS = {
    "collect": ("collection._command", "collect_command"),
    "verify": ("verification._command", "verify_command"),
    "prepare": ("preparation._command", "prepare_command"),
    "check": ("checks._command", "check_command"),
    "serve": ("serving._command", "serve_command"),
    "front": ("front._command", "front_command"),
    "talk": ("front._command", "talk_command"),
    "status": ("serving._command", "status_command"),
    "sync-adapters": ("serving._command", "sync_adapters_command"),
    "view": ("viewer._command", "view_command"),
    "new-environment": ("scaffold._command", "new_environment_command"),
}
_GROUPS = {
    "nemo-gym": (
        "NeMo Gym's servers and agents, hosted unchanged (`serve nemo-gym:<server>`).",
        {"install": ("serving._command", "nemo_gym_install_command")},
    ),
    "secure": (
        "Lock a shared bus: nats-server configuration and per-role credentials.",
        {"init": ("security._command", "secure_init_command")},
    ),
}


def _command(where: tuple[str, str]) -> Any:
    module, name = where
    return getattr(import_module(f".{module}", __package__), name)


def build_app(only: str | None = None) -> typer.Typer:
    """The command line with every command, or with just the command (or group) `only`."""
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
    for name, where in _COMMANDS.items():
        if only in (None, name):
            app.command(name)(_command(where))
    for group, (help_text, commands) in _GROUPS.items():
        if only in (None, group):
            sub = typer.Typer(help=help_text)
            for name, where in commands.items():
                sub.command(name)(_command(where))
            app.add_typer(sub, name=group)
    app.callback()(_main)
    return app


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gym-runner {VERSION}")
        raise typer.Exit()


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
    thousands of calls a second that is most of its CPU, and a leak into its log.

    On a terminal, rich's columns; elsewhere (a worker's log file, a pipe) one plain line
    per record, never wrapped or padded, so a subject or path stays whole for grep."""
    handler: logging.Handler
    if err.is_terminal:
        handler = RichHandler(console=err, show_path=False)
        handler.setFormatter(logging.Formatter("%(message)s"))  # rich shows the time and level
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)-8s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("gymbus").setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in _PER_DOCUMENT:
        logging.getLogger(name).setLevel(logging.CRITICAL)


_PIPED_HELP_WIDTH = 110
"""Columns of `--help` when it is not shown on a terminal: rich would lay it out for 80,
cutting option names (`--rollout-time…`) that a `| grep` then misses, and pads every line
to the width it is given (200 made a page nobody reads in a pager or a file). At 110 no
command's option name or help is cut."""


def main() -> None:
    """`gym-runner`: the command its arguments name is the only one loaded (all of them
    for `--help`, or when a global option comes first)."""
    first = sys.argv[1] if len(sys.argv) > 1 else None
    if not sys.stdout.isatty() and not os.environ.get("TERMINAL_WIDTH") and not os.environ.get("COLUMNS"):
        typer.rich_utils.MAX_WIDTH = _PIPED_HELP_WIDTH
    build_app(first if first in _COMMANDS or first in _GROUPS else None)()


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole command line, built once, when first asked for
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
