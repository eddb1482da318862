"""The rollout viewer's web server: the page, and a JSON API over the indexed files.

aiohttp's server, because aiohttp is already a run-time dependency (the vllm model
function's client): the viewer adds no package to what every install carries.

It listens on loopback only, and answers only requests addressed to it by that name
(`127.0.0.1:<port>` or `localhost:<port>`), so a web page the user visits cannot read
rollouts through a DNS name rebound to 127.0.0.1.

API (`<k>` is the file's position: 0 the rollouts, 1 their failures sidecar):
- `GET /api/<k>/list?agent=&failure=&outcome=ok|failed&reward_min=&reward_max=&offset=&limit=`:
  one page of matching list rows, with the file's agents, failure classes, skipped
  lines and reward histogram;
- `GET /api/<k>/rollout/<row>`: one whole rollout row.
"""

from __future__ import annotations

import asyncio
import math
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import msgspec
from aiohttp import web

from gymbus.schemas import VIEW_LIMITS, ViewLimits

from ._index import FileChanged, Query, RolloutIndex

__all__ = ["PAGE_FILES", "page_asset", "serve_view"]

PAGE_FILES = {"page.html": "text/html", "view.js": "text/javascript", "view.css": "text/css"}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store"}  # fmt: skip
_encode = msgspec.json.Encoder().encode


def page_asset(name: str) -> str:
    """One file of the page (package data beside this module)."""
    return resources.files("gymbus.runner.viewer").joinpath("page", name).read_text(encoding="utf-8")


@dataclass
class _Source:
    index: RolloutIndex
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _BadQuery(ValueError):
    pass


def _make_app(sources: list[_Source], hosts: set[str], limits: ViewLimits) -> web.Application:
    app = web.Application(middlewares=[_only_for(hosts)])
    assets = {name: page_asset(name) for name in PAGE_FILES}

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info.get("name", "page.html")
        return web.Response(text=assets[name], content_type=PAGE_FILES[name], headers=_HEADERS)

    async def listing(request: web.Request) -> web.Response:
        source = _source(sources, request)
        query, offset, limit = _parse_list(request, limits)
        async with source.lock:
            await asyncio.to_thread(source.index.refresh)
            body = _list_body(sources, source.index, query, offset, limit)
        return _json(body)

    async def rollout(request: web.Request) -> web.Response:
        source = _source(sources, request)
        row = _int(request.match_info["row"], "row")
        async with source.lock:
            await asyncio.to_thread(source.index.refresh)
            if not 0 <= row < source.index.rows:
                return _json({"error": f"no row {row}: the file has {source.index.rows}"}, status=404)
            summary = source.index.summary(row)
        try:
            data = await asyncio.to_thread(source.index.read, row)
        except FileChanged as exc:
            return _json({"error": str(exc)}, status=409)
        head = _encode({"row": row, "summary": summary})
        return web.Response(body=head[:-1] + b',"data":' + data + b"}", content_type="application/json",
                            headers=_HEADERS)  # fmt: skip

    async def no_icon(request: web.Request) -> web.Response:
        return web.Response(status=204)  # the page has no icon; answer browsers that ask

    app.router.add_get("/", asset)
    app.router.add_get("/favicon.ico", no_icon)
    app.router.add_get("/{name:view\\.(?:js|css)}", asset)
    app.router.add_get("/api/{source}/list", listing)
    app.router.add_get("/api/{source}/rollout/{row}", rollout)
    return app


def _only_for(hosts: set[str]) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.host not in hosts:
            return _json({"error": f"this viewer answers only requests to {' or '.join(sorted(hosts))}"}, 403)
        try:
            return await handler(request)
        except _BadQuery as exc:
            return _json({"error": str(exc)}, status=400)

    return check


def _names_of(port: int) -> set[str]:
    """The `Host` values a browser sends to this server."""
    return {f"127.0.0.1:{port}", f"localhost:{port}"}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json", headers=_HEADERS)


def _source(sources: list[_Source], request: web.Request) -> _Source:
    position = _int(request.match_info["source"], "source")
    if not 0 <= position < len(sources):
        raise _BadQuery(f"no file {position}: this viewer shows {len(sources)}")
    return sources[position]


def _parse_list(request: web.Request, limits: ViewLimits) -> tuple[Query, int, int]:
    args = request.query
    query = Query(
        agent=args.get("agent"), failure=args.get("failure"), outcome=args.get("outcome"),
        reward_min=_float(args["reward_min"], "reward_min") if "reward_min" in args else None,
        reward_max=_float(args["reward_max"], "reward_max") if "reward_max" in args else None,
    )  # fmt: skip
    if query.outcome not in (None, "ok", "failed"):
        raise _BadQuery("outcome must be `ok` or `failed`")
    offset = _int(args.get("offset", "0"), "offset")
    limit = _int(args.get("limit", str(limits.page_rows)), "limit")
    if offset < 0 or not 1 <= limit <= limits.max_page_rows:
        raise _BadQuery(f"offset must be >= 0 and limit 1..{limits.max_page_rows} (ViewLimits.max_page_rows)")
    return query, offset, limit


def _list_body(sources: list[_Source], index: RolloutIndex, query: Query, offset: int, limit: int) -> Any:
    selected = index.select(query)
    return {
        "sources": [{"name": s.index.path.name, "rows": s.index.rows} for s in sources],
        **index.describe(),
        "total": len(selected),
        "offset": offset,
        "page": [index.summary(row) for row in selected[offset : offset + limit]],
    }


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _BadQuery(f"{name} must be an integer, not {text!r}") from None


def _float(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise _BadQuery(f"{name} must be a number, not {text!r}")
    return value


async def serve_view(
    indexes: list[RolloutIndex], port: int, ready: Callable[[str], None], limits: ViewLimits = VIEW_LIMITS
) -> None:
    """Serve the viewer on 127.0.0.1:`port` (0: a free port) until SIGINT or SIGTERM; call
    `ready` with the page's URL once it accepts connections."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    app = _make_app([_Source(index) for index in indexes], _names_of(port), limits)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await web.SockSite(runner, sock).start()
        ready(f"http://127.0.0.1:{port}/")
        await stop.wait()
    finally:
        await runner.cleanup()
        sock.close()
