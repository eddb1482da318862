"""The census's model: one local OpenAI-compatible endpoint that answers deterministically
and records every request, so NeMo Gym's own stack and GymBus can be run against the same
policy and their calls compared.

Each model name gets its own base URL, `http://127.0.0.1:<port>/<name>/v1`, serving
`/responses` and `/chat/completions`: the policy and each judge are told apart by the path,
as separate endpoints would be. The answer is GymBus's offline policy's (a small generic
script, never tuned), with one addition a real endpoint makes too: a request that asks for
a JSON schema (`text.format` or `response_format`) gets a JSON value of that schema. The
policy reads the request as Responses parameters (`reading`: `null` members and spelled-out
defaults left out), so the same conversation gets the same answer, ids included, however
each side spells it.

The two sides' requests are compared as NeMo Gym sent them (`as_sent`), not in that
reading: every content part (images, audio) and every field, known or not, counts. Left
out are only `model` (each side names its own), `null` members and members spelled out with
their default meaning (`stream: false`, an empty tool list, an item's `type: message`),
and `prompt_cache_key`, which GymBus adds to each policy call on purpose (the rollout's
session id: the vLLM adapter keeps a rollout on one server by it, and OpenAI routes its
prompt cache by it; the answer does not depend on it). Where GymBus sent a model's request
over the other API than NeMo Gym did (GymBus serves each model over one API; a NeMo Gym
server may ask the policy over Chat Completions), GymBus's request is put into NeMo Gym's
API by GymBus's own conversion (`in_api`), so whatever that conversion loses shows.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from gymbus.functions.models._chat import chat_request
from gymbus.functions.models.offline import offline_policy, schema_instance
from gymbus.functions.nemo_gym._chat import chat_completion, params_from_chat
from gymbus.schemas import ContentPart, GymError, Item, Response, ResponsesCreateParams

__all__ = ["ACCEPTED", "Recorder", "as_sent", "in_api", "reading"]

ACCEPTED = ("prompt_cache_key",)
"""Request fields one side sends and the other does not, on purpose (see the docstring)."""
_params = msgspec.json.Decoder(ResponsesCreateParams)
_DEFAULTS = {"type": "message", "status": "completed", "annotations": [], "logprobs": [], "tools": [],
             "stream": False}  # fmt: skip
"""Members an item (or a request: no tools is an empty tool list, no `stream` is not
streaming) may spell out or leave out with the same meaning."""


def reading(api: str, body: dict[str, Any]) -> ResponsesCreateParams:
    """`body` (a Responses or Chat Completions request) as the Responses parameters the
    policy answers, without `model` and `ACCEPTED`: for answering only, never for comparing
    (a chat request's image parts and unknown item fields do not survive it)."""
    if api == "chat" and body.get("messages") == []:  # xstest probes its judge so as it starts
        params = ResponsesCreateParams(input=[])
    elif api == "chat":
        params = params_from_chat(_heard(body))
    else:
        params = _params.decode(msgspec.json.encode(_plain(body)))
    return _params.decode(msgspec.json.encode(as_sent(msgspec.to_builtins(params))))


def as_sent(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the census compares it: whole, but for `model`, `ACCEPTED`, `null` members
    and members spelled out with their default meaning."""
    plain: dict[str, Any] = _plain(body)
    for name in ("model", *ACCEPTED):
        plain.pop(name, None)
    return plain


def in_api(api: str, body: dict[str, Any], wanted: str) -> dict[str, Any]:
    """`body`, a request GymBus sent over `api`, as GymBus's own conversion puts it into the
    `wanted` API (`chat` as its Chat Completions adapter sends it; `responses` as its
    model shim reads a chat request); `body` itself where the APIs are the same."""
    if api == wanted:
        return body
    if wanted == "chat":
        chat = chat_request(_params.decode(msgspec.json.encode(_plain(body))), str(body.get("model", "")))
        extra = chat.pop("extra_body", {})  # merged into the request, as the adapter sends it
        return chat | extra
    if body.get("messages") == []:
        return {"input": []}
    return msgspec.to_builtins(params_from_chat(body))


def _heard(chat: dict[str, Any]) -> dict[str, Any]:
    """`chat` with each `audio_url` part (NeMo Gym's audio side channel, spliced in by a vLLM
    adapter) as a text part naming its clip by digest: Responses parameters have no audio, and
    the clip must count in what the policy answers."""
    messages = []
    for message in chat.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = [_clip(part) if isinstance(part, dict) and part.get("type") == "audio_url" else part
                       for part in content]  # fmt: skip
            message = {**message, "content": content}
        messages.append(message)
    return {**chat, "messages": messages}


def _clip(part: dict[str, Any]) -> dict[str, str]:
    url = str((part.get("audio_url") or {}).get("url", ""))
    return {
        "type": "text",
        "text": f"[audio {hashlib.sha256(url.encode()).hexdigest()[:16]}, {len(url)} chars]",
    }


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if not isinstance(value, dict):
        return value
    plain = {name: _plain(member) for name, member in value.items() if member is not None}
    for name, default in _DEFAULTS.items():
        if plain.get(name) == default and (name != "type" or "role" in plain):
            del plain[name]
    return plain


class Recorder:
    """The endpoint, on a thread of its own (NeMo Gym's side and GymBus's side both call it
    while the census waits on them): `log` names the file each request is appended to."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.port = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: Any = None
        self._thread = threading.Thread(target=self._serve, name="census endpoint", daemon=True)

    def url(self, model: str) -> str:
        return f"http://127.0.0.1:{self.port}/{model}/v1"

    def __enter__(self) -> Recorder:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the census endpoint did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        import asyncio

        loop = self._loop = asyncio.new_event_loop()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/{model}/v1/{api:responses|chat/completions}", self._call)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    async def _call(self, request: web.Request) -> web.Response:
        model, api = request.match_info["model"], request.match_info["api"]
        api = "chat" if api.startswith("chat") else "responses"
        body = await request.json()
        with self._lock, open(self.log, "a") as out:
            out.write(json.dumps({"model": model, "api": api, "request": body}) + "\n")
        try:
            params = reading(api, body)
            params.model = body.get("model")
            answer = _schema_answer(params) or await offline_policy(params)
        except (GymError, msgspec.MsgspecError, ValueError) as exc:
            return web.json_response({"error": {"type": "bad_request", "message": str(exc)}}, status=400)
        reply = chat_completion(answer) if api == "chat" else _echoed(msgspec.to_builtins(answer), body)
        return web.json_response(reply)


def _echoed(response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A Responses reply with the request's tool settings, as OpenAI's echo them (NeMo Gym's
    model server requires them)."""
    response["tools"] = request.get("tools") or []
    response["tool_choice"] = request.get("tool_choice") or "auto"
    response["parallel_tool_calls"] = request.get("parallel_tool_calls", True)
    return response


def _leaf(name: str, kind: str, schema: dict[str, Any]) -> Any:
    """A schema's leaf value within its bounds (as a schema-following model answers)."""
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "string":
        text = (name or "answer").replace("_", " ")
        text = text * (1 + int(schema.get("minLength", 0)) // max(len(text), 1))
        return text[: schema["maxLength"]] if "maxLength" in schema else text
    return {"integer": 0, "number": 0.0, "boolean": False, "null": None}.get(kind, "")


def _schema_answer(params: ResponsesCreateParams) -> Response | None:
    """A value of the JSON schema the request asks for, or `None` when it asks for none."""
    form = (params.text or {}).get("format") if isinstance(params.text, dict) else None
    if not isinstance(form, dict) or form.get("type") not in ("json_schema", "json_object"):
        return None
    value = schema_instance(form.get("schema") or {"type": "object"}, _leaf)
    text = json.dumps(value)
    item = Item(type="message", id="msg_schema", role="assistant", status="completed",
                content=[ContentPart(type="output_text", text=text, annotations=[], logprobs=None)])  # fmt: skip
    name = params.model if isinstance(params.model, str) else "census"
    return Response(id="resp_schema", created_at=0.0, model=name, output=[item], status="completed")
