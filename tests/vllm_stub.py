"""A local stub of a vLLM server, for injecting faults into the `vllm` model function.

It answers `/v1/chat/completions` with token ids (or without, or with an error status the
test sets), `/tokenize` with a rendering the test chooses, and `/v1/completions` (tokens
in) with a Hermes tool call. Its LoRA endpoints (`/v1/models`, `/v1/load_lora_adapter`,
`/v1/unload_lora_adapter`) load adapters or refuse them with the status the test sets;
with `check_models`, a chat naming a model it does not serve gets vLLM's 404. Every request
body is recorded with its endpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fake_openai import ServerThread

__all__ = ["GENERATION", "PROMPT", "VllmStub", "serve_stub"]

PROMPT = [1, 5, 6, 2, 1, 7]
GENERATION = [8, 9, 2]  # ends with the end-of-turn token 2


@dataclass
class VllmStub:
    """What the stub answers next; every request body is recorded with its path."""

    status: int = 200
    message: str = ""
    fail_next: int = 0
    token_ids: bool = True
    rendering: list[int] = field(default_factory=lambda: list(PROMPT))
    chat_prompt: list[int] | None = None
    content: str = "It is cold."
    """The chat reply's text (a tool call a server without the tool parser leaves as text)."""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    load_status: int = 200
    """What `/v1/load_lora_adapter` answers (anything but 200 refuses the adapter)."""
    check_models: bool = False
    adapters: set[str] = field(default_factory=set)
    delay: float = 0.0
    """Seconds each chat takes (rollouts long enough to be in flight when a worker is killed)."""

    def reset(self) -> None:
        """Answer normally again and forget the requests (one stub serves a module's tests)."""
        fresh = VllmStub()
        for name in ("status", "message", "fail_next", "token_ids", "rendering", "chat_prompt", "content",
                     "load_status", "check_models", "delay"):  # fmt: skip
            setattr(self, name, getattr(fresh, name))
        self.requests.clear()
        self.adapters.clear()

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(("chat", body))
        await asyncio.sleep(self.delay)
        if self.check_models and body.get("model") not in {"stub", *self.adapters}:
            return JSONResponse(
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}}, 404
            )
        if self.fail_next:
            self.fail_next -= 1
            return JSONResponse({"error": {"message": self.message}}, self.status)
        choice: dict[str, Any] = {"message": {"content": self.content}, "finish_reason": "stop"}
        reply: dict[str, Any] = {"id": "c1", "model": "stub", "choices": [choice]}
        if self.token_ids and body.get("return_token_ids"):
            choice["token_ids"] = GENERATION
            choice["logprobs"] = {
                "content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in GENERATION]
            }
            reply["prompt_token_ids"] = self.chat_prompt or self.rendering
        return JSONResponse(reply)

    async def tokenize(self, request: Request) -> JSONResponse:
        self.requests.append(("tokenize", await request.json()))
        return JSONResponse({"tokens": self.rendering, "count": len(self.rendering), "max_model_len": 2048})

    async def completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(("completions", body))
        text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        logprobs = {"tokens": ["token_id:11", "token_id:2"], "token_logprobs": [-0.1, -0.2]}
        choice = {"text": text, "finish_reason": "stop", "token_ids": [11, 2], "logprobs": logprobs}
        return JSONResponse({"id": "k1", "model": "stub", "choices": [choice]})

    async def models(self, request: Request) -> JSONResponse:
        cards = [{"id": "stub", "parent": None, "max_model_len": 2048}]
        cards += [
            {"id": name, "parent": "stub", "root": f"/adapters/{name}"} for name in sorted(self.adapters)
        ]
        return JSONResponse({"object": "list", "data": cards})

    async def load(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(("load", body))
        if self.load_status != 200:
            return JSONResponse(
                {"error": {"message": "out of memory loading the adapter (injected)"}}, self.load_status
            )
        self.adapters.add(body["lora_name"])
        return JSONResponse({})

    async def unload(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(("unload", body))
        if body.get("lora_name") not in self.adapters:
            return JSONResponse({"error": {"message": "not found"}}, 404)
        self.adapters.discard(body["lora_name"])
        return JSONResponse({})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/load_lora_adapter", self.load, methods=["POST"]),
                Route("/v1/unload_lora_adapter", self.unload, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
            ]
        )


def serve_stub() -> Iterator[tuple[VllmStub, str]]:
    """The stub on a free loopback port (its `/v1` URL), until the generator is closed."""
    stub = VllmStub()
    server = ServerThread(stub.app())
    url = server.start() + "/v1"
    yield stub, url
    server.stop()
