"""NeMo Gym's HTTP API, served from the bus: one aiohttp app per fronted server.

    head server            GET /global_config_dict_yaml (the YAML as a JSON string)
    environment server X   POST /run, /aggregate_metrics
    agent X                POST /v1/responses (its loop, no verdict), /run, /aggregate_metrics
    resources server E     POST /seed_session, /verify, /aggregate_metrics, /<tool>
    model M                POST /v1/responses
    every server           GET /, /livez, /readyz, /health, /healthz

Statuses, as NeMo Gym's trainers read them (NeMo RL retries a 5xx as the infrastructure's
and fails the row on any other error):

- a `/run` answers 200 with the rewarded rollout, and otherwise GymBus's failure row
  (`_ng_failure_class`, `_ng_failure_message`, reward 0), worded as `collect` writes it:
  422 when the rollout ran and failed; 503 when no live worker serves the agent (at once
  for a new request; for one already waiting, after `Timeouts.unserved_grace`, or at once
  where its workers were given up on), or the bus is away; 502 when the workers died on
  the task every time it was delivered, or no result came by its deadline;
- any other route answers the `GymError` its call failed with at the error's own code
  (502 a model endpoint failed, 503 nobody serves it, ...), its body `{"error": {"type",
  "message"}}` as on the bus; a tool the environment lacks answers 404 with the body a
  NeMo Gym server gives it (`UnknownTool`), which NeMo Gym's agents hand the model.

A resources server's session is the bus's: `/seed_session` starts one and sets the cookie
`gymbus_session`; tools and `/verify` with that cookie work in it (without one, in a
session of their own: a stateless verify, as Unsloth's reward function sends).

`/seed_session` and `/verify` take and answer the bodies of NeMo Gym 0.7.0's base models:
a seed request may be empty (`BaseSeedSessionRequest` declares no field; the bus's seed
takes a task row, so one without `responses_create_params` is sent an empty
conversation), and a `/verify` answers its request with the verdict's fields set on it
(`BaseVerifyResponse`: the request, `reward`, and the verifier's own fields).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable

import msgspec
import yaml
from aiohttp import web

from gymbus.bus.front import FrontBus, OutcomeStatus
from gymbus.functions.registry import AGENTS
from gymbus.schemas import (
    AGENT_REF,
    RESPONSES_CREATE_PARAMS,
    GymError,
    ResponsesCreateParams,
    UnknownTool,
    merge_row,
    row_fields,
)

from .._metrics import Metrics
from ._layout import FrontServer, Layout

__all__ = ["SESSION_COOKIE", "app_for"]

log = logging.getLogger("gymbus.front")

SESSION_COOKIE = "gymbus_session"
READINESS = ("/", "/livez", "/readyz", "/health", "/healthz")
_RUN_STATUS = {
    OutcomeStatus.ROLLOUT: 200,
    OutcomeStatus.FAILED: 422,
    OutcomeStatus.UNAVAILABLE: 503,
    OutcomeStatus.LOST: 502,
}
_params = msgspec.json.Decoder(ResponsesCreateParams)
_encode = msgspec.json.Encoder().encode
_NO_CONVERSATION: dict[str, list[object]] = {"input": []}
"""The `responses_create_params` of a seed request that has none: a session before any turn."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def app_for(server: FrontServer, layout: Layout, front: FrontBus) -> web.Application:
    """The app of one fronted server."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in READINESS:
        app.router.add_get(path, _ready)
    if server.kind == "head":
        app.router.add_get("/global_config_dict_yaml", _config(layout))
    elif server.kind in ("environment_servers", "responses_api_agents"):
        app.router.add_post("/run", _guarded(_run(front, server.target)))
        app.router.add_post("/aggregate_metrics", _guarded(_aggregate(server.target)))
        if server.kind == "responses_api_agents":
            app.router.add_post("/v1/responses", _guarded(_talk(front, server.target)))
    elif server.kind == "resources_servers":
        app.router.add_post("/seed_session", _guarded(_seed(front, server.target)))
        app.router.add_post("/verify", _guarded(_verify(front, server.target)))
        app.router.add_post("/aggregate_metrics", _guarded(_aggregate(None)))
        app.router.add_post("/{tool}", _guarded(_tool(front, server.target)))
    elif server.kind == "responses_api_models":
        app.router.add_post("/v1/responses", _guarded(_generate(front, server.target)))
    return app


async def _ready(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _config(layout: Layout) -> Handler:
    """NeMo Gym's head server answers its config as YAML text, the text as a JSON string."""
    text = json.dumps(yaml.safe_dump(layout.config(), sort_keys=False))

    async def config(_: web.Request) -> web.Response:
        return web.Response(text=text, content_type="application/json")

    return config


def _raw(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


def _guarded(handler: Handler) -> Handler:
    """`handler`, its `GymError`s answered at their own code, a bad body with 400."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except UnknownTool:
            return web.Response(status=404, body=UnknownTool.body, content_type="application/json")
        except GymError as exc:
            status = int(exc.code) if exc.code.isdigit() else 500
            return _error(status, exc.type, str(exc))
        except (msgspec.DecodeError, ValueError) as exc:
            return _error(400, "bad_request", f"{request.path}: {exc}")

    return guarded


def _run(front: FrontBus, agent: str) -> Handler:
    async def run(request: web.Request) -> web.Response:
        row = await request.read()
        row_fields(row)  # not a JSON object: 400 before it becomes a task
        outcome = await front.run(agent, row)
        return _raw(outcome.body, _RUN_STATUS[outcome.status])

    return run


def _aggregate(agent: str | None) -> Handler:
    """NeMo Gym's aggregate metrics of the rows posted (`verify_responses`), as `collect`
    computes them for its `_aggregate_metrics.json`."""

    async def aggregate(request: web.Request) -> web.Response:
        rows = json.loads(await request.read()).get("verify_responses", [])
        metrics = Metrics()
        for row in rows:
            fields = row_fields(_encode(row))
            name = agent or (row.get(AGENT_REF) or {}).get("name") or ""
            metrics.add(name, fields)
        entries = metrics.aggregate()
        entry = entries[0] if entries else {"agent_metrics": {}, "key_metrics": {}, "group_level_metrics": []}
        keys = ("group_level_metrics", "agent_metrics", "key_metrics")
        return web.json_response({key: entry[key] for key in keys})

    return aggregate


def _talk(front: FrontBus, agent_name: str) -> Handler:
    async def talk(request: web.Request) -> web.Response:
        agent = AGENTS.get(agent_name)
        if agent is None:
            message = f"{agent_name} is not one of GymBus's agents here; `/run` reaches it on the bus"
            return _error(501, "not_implemented", message)
        params = _params.decode(await request.read())
        return _raw(_encode(await front.talk(agent, params)))

    return talk


def _session(request: web.Request) -> str:
    return request.cookies.get(SESSION_COOKIE) or uuid.uuid4().hex


def _seed(front: FrontBus, environment: str) -> Handler:
    async def seed(request: web.Request) -> web.Response:
        session = uuid.uuid4().hex
        row = _seed_row(await request.read())
        reply = _raw(await front.seed(environment, row, session) or b"{}")
        reply.set_cookie(SESSION_COOKIE, session, httponly=True)
        return reply

    return seed


def _seed_row(body: bytes) -> bytes:
    """The task row the bus's seed takes for NeMo Gym's seed request `body` (module docstring)."""
    body = body.strip() or b"{}"
    if RESPONSES_CREATE_PARAMS in row_fields(body):
        return body
    return merge_row(body, **{RESPONSES_CREATE_PARAMS: _NO_CONVERSATION})


def _verify(front: FrontBus, environment: str) -> Handler:
    async def verify(request: web.Request) -> web.Response:
        body = await request.read()
        row_fields(body)  # not a JSON object: 400 before it reaches the verifier
        verdict = await front.verify(environment, body, _session(request))
        return _raw(merge_row(body, verdict))

    return verify


def _tool(front: FrontBus, environment: str) -> Handler:
    async def tool(request: web.Request) -> web.Response:
        name = request.match_info["tool"]
        output = await front.tool(environment, name, await request.read(), _session(request))
        return _raw(output)

    return tool


def _generate(front: FrontBus, model: str) -> Handler:
    async def generate(request: web.Request) -> web.Response:
        return _raw(await front.generate(model, await request.read()))

    return generate
