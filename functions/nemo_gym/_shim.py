"""The model servers a hosted NeMo Gym server calls (its judges), as loopback HTTP shims
in front of GymBus's model subjects.

A NeMo Gym server reaches a model server by name (`judge_model_server: {type:
responses_api_models, name: policy_model}`), at the host and port the global config gives
that name, with `POST /v1/responses`. The bridge gives each name it references a shim on
its own loopback port, which hands the request to `Models.generate` for the model served
on the bus as that name (NeMo Gym's `policy_model` is GymBus's `policy`), so the offline
policy or any served model can judge. Chat Completions is not served: a server that asks
for it gets a 501 saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gymbus.schemas import GymError, Response, ResponsesCreateParams

from .._spec import Models
from ._config import POLICY

if TYPE_CHECKING:  # the web server loads only in a worker that hosts a NeMo Gym server
    from aiohttp import web

__all__ = ["ModelShims", "bus_model_name"]

_params = msgspec.json.Decoder(ResponsesCreateParams)
_encode = msgspec.json.Encoder().encode
# What the OpenAI SDK's `Response` (NeMo Gym's `NeMoGymResponse`) requires that a GymBus
# response may leave out.
_REQUIRED = {"parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def bus_model_name(nemo_gym_name: str) -> str:
    """The model subject a NeMo Gym model server name maps to."""
    return "policy" if nemo_gym_name == POLICY else nemo_gym_name


def _status(error: GymError) -> int:
    code = int(error.code) if error.code.isdigit() else 500
    return code if 400 <= code < 600 else 500


class ModelShims:
    """One loopback HTTP shim per model server name; `ports` says where each listens."""

    def __init__(self, models: Models) -> None:
        self.models = models
        self.runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def start(self, names: tuple[str, ...]) -> dict[str, int]:
        from aiohttp import web

        for name in names:
            runner = web.AppRunner(self._app(bus_model_name(name)), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            self.ports[name] = _port(runner)
        return self.ports

    def _app(self, model: str) -> web.Application:
        from aiohttp import web

        async def responses(request: web.Request) -> web.Response:
            try:
                params = _params.decode(await request.read())
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return _json(400, {"error": {"type": "bad_request", "message": f"invalid request: {exc}"}})
            try:
                answer = await self.models.generate(model, params)
            except GymError as exc:
                return _json(_status(exc), {"error": {"type": exc.type, "message": exc.message}})
            return _json(200, _complete(answer))

        async def chat(request: web.Request) -> web.Response:
            message = f"the bridge's model shim for {model} serves the Responses API only (/v1/responses)"
            return _json(501, {"error": {"type": "not_implemented", "message": message}})

        async def live(request: web.Request) -> web.Response:
            return _json(200, {"status": "ok"})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/responses", responses)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/", live)
        return app

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()
        self.runners.clear()


def _complete(answer: Response) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.json.decode(_encode(answer))
    for key, value in _REQUIRED.items():
        if body.get(key) is None:
            body[key] = value
    return body


def _json(status: int, value: Any) -> web.Response:
    from aiohttp import web

    return web.Response(status=status, body=_encode(value), content_type="application/json")


def _port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the model shim is not listening")
