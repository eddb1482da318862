"""The resources server a hosted NeMo Gym agent calls, as a loopback HTTP shim in front of
the environment on the bus.

The agent reaches its resources server by the instance name in its config, which the
bridge points at this shim; each call goes to the environment `<env>` on the bus as a call
of the rollout it belongs to (`_rollouts`: its session, deadline, retries), so the
environment may be a hosted NeMo Gym server or a GymBus one, on any machine, and a
rollout's session stays on the replica that seeded it:

    POST /seed_session, /reset   gym.env.<env>.seed   (the reply is the server's:
                                                       a Gymnasium server's first observation)
    POST /verify                 gym.env.<env>.verify  (the reply echoes the request,
                                                        as a NeMo Gym server's does)
    POST /<tool>                 gym.env.<env>.tool.<tool>   (`/step`, `/close`, any tool;
                                                              one the environment lacks
                                                              answers as a NeMo Gym server's)
    POST /close_session          answered here: sessions on the bus expire by themselves

Every reply sets the rollout's cookie, so an agent that threads its resources server's
cookies carries the rollout into its tool calls; 0.7.0's agents also say the rollout in
the path (`/ng-rollout/<id>/seed_session`, `_rollouts`). A call the agent made for no
rollout it was given is refused (400), never run in a session nobody asked for. A bus error becomes
the HTTP status of its code, with its message; a call the rollout cannot go on without
(a lost tool call) is recorded on the rollout, which its agent function raises again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gymbus.schemas import GymError, Response, UnknownTool

from ._rollouts import COOKIE, Rollout, Rollouts, take_field, take_path

if TYPE_CHECKING:  # the web server loads only in a worker that hosts a NeMo Gym agent
    from aiohttp import web

__all__ = ["ResourcesShim"]

_SEEDS = ("/seed_session", "/reset")
_LOCAL = ("/close_session", "/aggregate_metrics")
_encode = msgspec.json.Encoder().encode
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])


class _Verified(msgspec.Struct):
    response: msgspec.Raw
    """As the agent made it: a NeMo Gym agent's may carry fields of its own (toolsandbox's
    `env_id`), which its server's verify requires."""


class ResourcesShim:
    """A loopback HTTP server in front of the environment `environment` on the bus."""

    def __init__(self, environment: str, rollouts: Rollouts) -> None:
        self.environment = environment
        self.rollouts = rollouts
        self.runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Start listening; the port."""
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/", self._live)
        app.router.add_post("/{path:.*}", self._call)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return int(self.runner.addresses[0][1])

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _live(self, request: web.Request) -> web.Response:
        return _json(200, {"status": "ok"})

    async def _call(self, request: web.Request) -> web.Response:
        in_path, path = take_path(request.path)
        token, body = take_field(await request.read())
        token = token or in_path or request.cookies.get(COOKIE)
        rollout = self.rollouts.get(token)
        if rollout is None or token is None:
            message = (
                f"{request.path} reached the bridge's shim for {self.environment} outside any rollout "
                f"(no `{COOKIE}` cookie, `_gymbus_rollout` field or `/ng-rollout/` path): the agent "
                "did not pass its run's on"
            )
            return _json(400, {"error": {"type": "bad_request", "message": message}})
        try:
            status, reply = await self._forward(path, body, rollout)
        except UnknownTool:
            status, reply = 404, UnknownTool.body
        except GymError as exc:
            status, reply = _status(exc), _encode({"error": {"type": exc.type, "message": exc.message}})
        except Exception as exc:  # the rollout cannot go on: its agent function raises it
            rollout.lost = exc
            status, reply = 500, _encode({"error": {"type": "rollout_lost", "message": str(exc)}})
        response = _json(status, msgspec.Raw(reply))
        response.set_cookie(COOKIE, token)
        return response

    async def _forward(self, path: str, body: bytes, rollout: Rollout) -> tuple[int, bytes]:
        calls = rollout.calls
        if path in _SEEDS:
            return 200, await calls.seed(body) or b"{}"
        if path in _LOCAL:
            return 200, b"{}"
        if path == "/verify":
            try:
                response = msgspec.json.decode(body, type=_Verified).response
                msgspec.json.decode(response, type=Response)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                problem = {"loc": ["body", "response"], "msg": str(exc), "type": "invalid"}
                return 422, _encode({"detail": [problem]})
            return 200, _echoed(body, await calls.verify(body, response))
        tool = path.strip("/")
        if not tool or "/" in tool:
            return 404, _encode({"detail": f"no route {path}"})
        return 200, (await calls.tool(tool, body.decode())).encode()


def _echoed(request: bytes, reply: bytes) -> bytes:
    """The verify reply as a NeMo Gym server gives it: the request, with the verifier's
    fields set (the bus's reply leaves out the parameters and response it was sent)."""
    try:
        return _encode({**_fields.decode(request), **_fields.decode(reply)})
    except (msgspec.DecodeError, msgspec.ValidationError):
        return reply


def _status(error: GymError) -> int:
    code = int(error.code) if error.code.isdigit() else 500
    return code if 400 <= code < 600 else 500


def _json(status: int, value: Any) -> web.Response:
    from aiohttp import web

    return web.Response(status=status, body=_encode(value), content_type="application/json")
