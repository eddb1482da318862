"""`gym-runner view`: index a rollouts file (and its failures sidecar), then serve the
viewer on loopback or write it as one HTML file.

The CLI imports this module only when `view` runs, so no other command (and no worker)
loads the web server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from gymbus.schemas import VIEW_LIMITS, ViewLimits

from .._console import plural
from .._output import OutputPaths
from ._app import serve_view
from ._html import PageTooLarge, render_html
from ._index import RolloutIndex

__all__ = ["PageTooLarge", "view", "view_files"]


def view_files(path: Path) -> list[Path]:
    """`path`, then its failures sidecar (`<stem>_failures.jsonl`) when there is one."""
    sidecar = OutputPaths.for_output(path).failures
    if path.stem.endswith("_failures") or not sidecar.is_file():
        return [path]
    return [path, sidecar]


def view(
    path: Path, port: int, html: Path | None, say: Callable[[str], None], limits: ViewLimits = VIEW_LIMITS
) -> None:
    """Index `path` and its sidecar, then write `html` if given, else serve until Ctrl-C.
    The page's URL goes to standard output; everything else to `say`."""
    indexes = [_indexed(file, say, limits) for file in view_files(path)]
    if html is not None:
        page = render_html(indexes, limits)
        html.write_text(page.html, encoding="utf-8")
        for note in page.notes:
            say(note)
        say(f"Wrote {html} ({html.stat().st_size} bytes)")
        return

    def ready(url: str) -> None:
        print(url, flush=True)
        say("Serving the viewer on loopback; Ctrl-C stops it.")

    asyncio.run(serve_view(indexes, port, ready, limits))
    say("Stopped.")


def _indexed(path: Path, say: Callable[[str], None], limits: ViewLimits) -> RolloutIndex:
    started = time.perf_counter()
    index = RolloutIndex(path, limits)
    index.refresh()
    line = f"Indexed {plural(index.rows, 'row')} of {path} in {time.perf_counter() - started:.1f} s"
    if index.skipped_count:
        named = ", ".join(str(s.line) for s in index.skipped)
        more = " ..." if index.skipped_count > len(index.skipped) else ""
        line += f"; skipped {plural(index.skipped_count, 'line')} that hold no row: {named}{more}"
    say(line)
    return index
