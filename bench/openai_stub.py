"""A local OpenAI-compatible endpoint backed by the offline policy, for benchmarks and faults.

`POST /v1/responses` answers what the offline policy would (with the request's `tools`,
`tool_choice` and `parallel_tool_calls`, as OpenAI's endpoint echoes them), after `latency` seconds; a
`failure_rate` share of requests answers 429 or 500 instead (a seeded RNG, so a run is
repeatable). `POST /v1/chat/completions` answers one fixed reply, with vLLM's token ids
and logprobs when the request asks for them (`return_token_ids`), as a vLLM server would. It is an `aiohttp.web` server, so one process keeps up with thousands of
requests per second. Run it alone with `python -m bench.openai_stub --port 8000 --latency 0.2`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import threading
from dataclasses import dataclass, field

import msgspec
from aiohttp import web

from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import ResponsesCreateParams

_decoder = msgspec.json.Decoder(ResponsesCreateParams)
_FAILURE = b'{"error": {"message": "injected failure", "type": "server_error"}}'


class _ChatAsk(msgspec.Struct):
    return_token_ids: bool = False


_chat_ask = msgspec.json.Decoder(_ChatAsk)
_GENERATED = list(range(300, 316))
_CHAT = {
    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "It is cold in San Francisco today."}}],
    "usage": {"prompt_tokens": 180, "completion_tokens": len(_GENERATED), "total_tokens": 180 + len(_GENERATED)},
}  # fmt: skip
_CHAT_REPLY = msgspec.json.encode(_CHAT)
_CHAT_TOKENS_REPLY = msgspec.json.encode(
    {
        **_CHAT,
        "prompt_token_ids": list(range(1, 181)),
        "choices": [
            {
                **_CHAT["choices"][0],  # type: ignore[index]
                "token_ids": _GENERATED,
                "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": -0.25} for t in _GENERATED]},
            }
        ],
    }
)


@dataclass
class OpenAIStub:
    latency: float = 0.0
    failure_rate: float = 0.0
    seed: int = 0
    served: int = 0
    failed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    async def responses(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.rng.random() < self.failure_rate:
            self.failed += 1
            return web.Response(
                body=_FAILURE, status=self.rng.choice((429, 500)), content_type="application/json"
            )
        params = msgspec.structs.replace(_decoder.decode(body), model="stub")
        self.served += 1
        # Echoed as OpenAI's endpoint echoes them: NeMo Gym's model server requires them.
        response = msgspec.structs.replace(
            await offline_policy(params),
            tools=params.tools or [],
            tool_choice=params.tool_choice or "auto",
            parallel_tool_calls=params.parallel_tool_calls is not False,
        )
        return web.Response(body=msgspec.json.encode(response), content_type="application/json")

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.latency:
            await asyncio.sleep(self.latency)
        self.served += 1
        reply = _CHAT_TOKENS_REPLY if _chat_ask.decode(body).return_token_ids else _CHAT_REPLY
        return web.Response(body=reply, content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StubServer:
    """The stub on a free loopback port, in a daemon thread with its own event loop."""

    def __init__(self, stub: OpenAIStub, port: int = 0) -> None:
        self.stub = stub
        self.port = port or free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        # A stub told to answer in an hour must still stop at once.
        self.runner = web.AppRunner(stub.app(), access_log=None, shutdown_timeout=0.5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(timeout=10)
        return self.url

    async def _serve(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, backlog=16384).start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    parser.add_argument("--failure-rate", type=float, default=0.0, help="share answered 429/500")
    args = parser.parse_args()
    stub = OpenAIStub(args.latency, args.failure_rate)
    web.run_app(stub.app(), host="127.0.0.1", port=args.port, backlog=16384, access_log=None, print=None)


if __name__ == "__main__":
    main()
