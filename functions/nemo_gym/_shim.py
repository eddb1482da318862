"""The model servers a hosted NeMo Gym server or agent calls, as loopback HTTP shims in
front of GymBus's model subjects.

A NeMo Gym server reaches a model server by name (`judge_model_server: {type:
responses_api_models, name: policy_model}`), at the host and port the global config gives
that name, with `POST /v1/responses` or `POST /v1/chat/completions` (also under the
`/ng-rollout/<id>/...` prefixes 0.7.0's rollout capture adds); `${policy_base_url}` in a
config is the policy's shim too. The bridge gives each name a shim on its own loopback
port, which hands the request to the model served on the bus as that name (NeMo Gym's
`policy_model` is GymBus's `policy`), so the offline policy or any served model can judge.

A call of a hosted agent's rollout (its parameters' metadata or its path's rollout prefix
carry the rollout's token, `_rollouts`) goes as that rollout's own model call: its session, deadline and retries.
Other calls (a server's judge) go through `Models`, which does not wait for a model
nobody serves: such a call fails at once, with 424 and "no model serves `judge_model`".
No error is answered with a status NeMo Gym's clients take for a rate limit (502, 503,
504), which they retry without end: what the bus already retried is a 500.
Token ids and logprobs on a response's items pass through unchanged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from gymbus.schemas import GymError, NoResponders, Response, ResponsesCreateParams

from .._spec import Models
from ._chat import chat_completion, params_from_chat
from ._config import POLICY
from ._rollouts import METADATA_KEY, Rollouts, take_path

if TYPE_CHECKING:  # the web server loads only in a worker that hosts a NeMo Gym server
    from aiohttp import web

__all__ = ["ModelShims", "bus_model_name"]

log = logging.getLogger("gymbus.nemo_gym")

_params = msgspec.json.Decoder(ResponsesCreateParams)
_encode = msgspec.json.Encoder().encode
# What the OpenAI SDK's `Response` (NeMo Gym's `NeMoGymResponse`) requires that a GymBus
# response may leave out.
_REQUIRED = {"parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
_RATE_LIMITED = {429, 502, 503, 504, 520}
"""Statuses NeMo Gym's OpenAI client retries without counting the tries."""
_NOT_SERVED = 424
_REASON_CHARS = 300


def bus_model_name(nemo_gym_name: str) -> str:
    """The model subject a NeMo Gym model server name maps to."""
    return "policy" if nemo_gym_name == POLICY else nemo_gym_name


def _status(error: GymError) -> int:
    if isinstance(error, NoResponders):
        return _NOT_SERVED
    code = int(error.code) if error.code.isdigit() else 500
    return 500 if code in _RATE_LIMITED or not 400 <= code < 600 else code


def _message(error: GymError, name: str) -> str:
    if isinstance(error, NoResponders):
        served = bus_model_name(name)
        return (
            f"no model serves `{name}` (nothing on the bus answers as `{served}`): serve one under "
            f"that name, e.g. `gym-runner serve <model> --served-model policy,{served}`"
        )
    return error.message


class ModelShims:
    """One loopback HTTP shim per model server name; `ports` says where each listens.
    Calls tagged with a rollout of `rollouts` are made as that rollout's."""

    def __init__(self, models: Models, rollouts: Rollouts | None = None) -> None:
        self.models = models
        self.rollouts = rollouts or Rollouts()
        self.runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}
        self.unserved: set[str] = set()

    async def start(self, names: tuple[str, ...]) -> dict[str, int]:
        """Start a shim for each name and for the policy; where each listens."""
        from aiohttp import web

        for name in dict.fromkeys((*names, POLICY)):
            runner = web.AppRunner(self._app(name), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            self.ports[name] = _port(runner)
        return self.ports

    async def generate(self, name: str, params: ResponsesCreateParams, token: str | None = None) -> Response:
        """The model `name` serves's answer to `params`: as its rollout's call if tagged
        (in the metadata, or by `token`, the one its path carried)."""
        metadata = params.metadata if isinstance(params.metadata, dict) else {}
        rollout = self.rollouts.get(metadata.pop(METADATA_KEY, None) or token)
        if isinstance(params.metadata, dict) and not params.metadata:
            params.metadata = msgspec.UNSET
        if rollout is not None:
            return await rollout.calls.model(params, bus_model_name(name))
        return await self.models.generate(bus_model_name(name), params)

    def _app(self, name: str) -> web.Application:
        from aiohttp import web

        async def call(request: web.Request) -> web.Response:
            token, path = take_path(request.path.rstrip("/"))
            chat = path.endswith("/chat/completions")
            if not chat and not path.endswith("/responses"):
                served = "/v1/responses and /v1/chat/completions"
                return _error(404, "not_found", f"the model shim for {name} serves {served}")
            try:
                body = await request.read()
                params = params_from_chat(msgspec.json.decode(body)) if chat else _params.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError, GymError, AttributeError) as exc:
                return _error(400, "bad_request", f"invalid request: {exc}")
            try:
                answer = await self.generate(name, params, token)
            except GymError as exc:
                if isinstance(exc, NoResponders) and name not in self.unserved:
                    self.unserved.add(name)  # said once: a server may swallow the error into a reward
                    log.warning("%s", _message(exc, name))
                return _error(_status(exc), exc.type, _message(exc, name))
            return _json(200, chat_completion(answer) if chat else _complete(answer))

        async def live(request: web.Request) -> web.Response:
            return _json(200, {"status": "ok"})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/", live)
        app.router.add_post("/{path:.*}", call)
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


def _error(status: int, kind: str, message: str) -> web.Response:
    """An error reply whose reason phrase is the message too: NeMo Gym's servers report a
    failed judge call by aiohttp's `raise_for_status`, which shows the reason, not the body."""
    reason = " ".join(message.split())[:_REASON_CHARS].encode("ascii", "replace").decode()
    return _json(status, {"error": {"type": kind, "message": message}}, reason)


def _json(status: int, value: Any, reason: str | None = None) -> web.Response:
    from aiohttp import web

    return web.Response(status=status, reason=reason, body=_encode(value), content_type="application/json")


def _port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the model shim is not listening")
