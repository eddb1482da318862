"""`gym-runner view --html`: the viewer as one self-contained HTML file.

The page's script, style and data sit inside the file; it opens from disk with no server
and no network. A browser holds the whole page, so what it embeds is bounded
(`ViewLimits`): every list row up to `html_rows` (a larger file is refused: serve it),
and whole rollouts, the first in file order, up to `html_rollouts` and
`html_rollout_bytes`; the page says which rollouts it left out and why.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from gymbus.schemas import VIEW_LIMITS, ViewLimits

from ._app import page_asset
from ._index import RolloutIndex

__all__ = ["HtmlPage", "PageTooLarge", "render_html"]

_encode = msgspec.json.Encoder().encode


class PageTooLarge(ValueError):
    """The file has more rows than a self-contained page may hold; the message names the limit."""


@dataclass(frozen=True)
class HtmlPage:
    html: str
    notes: list[str]
    """What the page left out, one sentence per file (empty when it holds everything)."""


def render_html(indexes: list[RolloutIndex], limits: ViewLimits = VIEW_LIMITS) -> HtmlPage:
    """The self-contained page showing `indexes` (already refreshed)."""
    sources, notes = [], []
    for index in indexes:
        source, note = _embed(index, limits)
        sources.append(source)
        notes += [note] if note else []
    data = _encode({"sources": sources})
    # `<` appears in JSON only inside strings, where \u003c means the same: no rollout text
    # can close the script element it sits in.
    data = data.replace(b"<", b"\\u003c")
    return HtmlPage(_page(data.decode()), notes)


def _embed(index: RolloutIndex, limits: ViewLimits) -> tuple[dict[str, Any], str]:
    if index.rows > limits.html_rows:
        raise PageTooLarge(
            f"{index.path} has {index.rows} rows; a self-contained page holds at most {limits.html_rows} "
            f"(ViewLimits.html_rows). Serve it instead: gym-runner view {index.path}"
        )
    rollouts: list[msgspec.Raw] = []
    size = 0
    for row in range(min(index.rows, limits.html_rollouts)):
        body = index.read(row)
        if size + len(body) > limits.html_rollout_bytes:
            break
        rollouts.append(msgspec.Raw(body))
        size += len(body)
    note = ""
    if len(rollouts) < index.rows:
        note = (
            f"This page embeds the first {len(rollouts)} of the {index.rows} rollouts of {index.path.name} "
            f"(at most {limits.html_rollouts} rollouts and {limits.html_rollout_bytes} bytes: "
            f"ViewLimits.html_rollouts, ViewLimits.html_rollout_bytes); the list shows every row. "
            f"`gym-runner view {index.path.name}` serves them all."
        )
    source = {
        **index.describe(),
        "summaries": [index.summary(row) for row in range(index.rows)],
        "rollouts": rollouts,
        "note": note,
    }
    return source, note


def _page(data: str) -> str:
    page, script, style = page_asset("page.html"), page_asset("view.js"), page_asset("view.css")
    assert "</script" not in script.lower() and "</style" not in style.lower()
    csp = (
        f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
        "base-uri 'none'; form-action 'none'"
    )
    page = _replace_once(
        page,
        '<meta charset="utf-8">',
        f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{csp}">',
    )
    page = _replace_once(page, '<link rel="stylesheet" href="view.css">', f"<style>{style}</style>")
    # The data goes in last, so no later replacement can touch a rollout's text.
    return _replace_once(
        page, '<script src="view.js"></script>',
        f'<script type="application/json" id="gymbus-data">{data}</script>\n<script>{script}</script>',
    )  # fmt: skip


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
