"""`gym-runner view`: the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._console import fail, say

__all__ = ["view_command"]


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
        fail(f"rollouts file not found: {rollouts}")
    from ._view import PageTooLarge, view  # here: no other command loads the web server

    try:
        view(rollouts, port, html, say)
    except (PageTooLarge, OSError) as exc:
        fail(str(exc))
