"""The `gym-runner` command line: the app, its global options, and each command from its room.

    collect          collection/_command.py
    verify           verification/_command.py
    prepare          preparation/_command.py
    check            checks/_command.py
    serve, status    serving/_command.py     (and `sync-adapters`, `nemo-gym install`)
    front, talk      front/_command.py
    view             viewer/_command.py
    secure init      security/_command.py
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.logging import RichHandler

from gymbus.bus import tune_gc

from ._console import err
from .checks._command import check_command
from .collection._command import collect_command
from .front import front_command, talk_command
from .preparation._command import prepare_command
from .security._command import secure_init_command
from .serving._command import nemo_gym_install_command, serve_command, status_command, sync_adapters_command
from .verification._command import verify_command
from .viewer._command import view_command

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
for name, command in (
    ("collect", collect_command),
    ("verify", verify_command),
    ("prepare", prepare_command),
    ("check", check_command),
    ("serve", serve_command),
    ("status", status_command),
    ("sync-adapters", sync_adapters_command),
    ("view", view_command),
    ("front", front_command),
    ("talk", talk_command),
):
    app.command(name)(command)

nemo_gym_app = typer.Typer(
    help="NeMo Gym's servers and agents, hosted unchanged (`serve nemo-gym:<server>`)."
)
nemo_gym_app.command("install")(nemo_gym_install_command)
app.add_typer(nemo_gym_app, name="nemo-gym")

secure_app = typer.Typer(help="Lock a shared bus: nats-server configuration and per-role credentials.")
secure_app.command("init")(secure_init_command)
app.add_typer(secure_app, name="secure")


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


def main() -> None:
    app()
