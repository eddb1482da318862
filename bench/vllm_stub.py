"""A local vLLM-like endpoint for benchmarks: Chat Completions with vLLM's token fields and
`/tokenize`, answered by the offline policy (the stub of `bench.openai_stub`, two routes more).

`POST /v1/chat/completions` answers what the offline policy would for the conversation, with
`prompt_token_ids`, `choices[0].token_ids` and `token_id:<id>` logprobs, as vLLM does when
asked for token ids; `POST /tokenize` renders a conversation as the chat route does. Tokens
are the UTF-8 bytes of a plain rendering (`<|role|>text<|end|>`) in which an assistant turn
renders exactly as it was generated, so each call's prompt extends the previous call's prompt
and generation, as a real server's does when its chat template is stable.
Run it alone with `python -m bench.vllm_stub --port 8000 --latency 0.2`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import msgspec
from aiohttp import web

from bench.openai_stub import OpenAIStub
from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import ContentPart, Item, ResponsesCreateParams, Tool

_END = "<|end|>"


class VLLMStub(OpenAIStub):
    """The offline policy behind vLLM's chat route, with token ids and logprobs. A
    `slow_share` of the calls (seeded) takes `slow_factor` times `latency`."""

    slow_share: float = 0.0
    slow_factor: float = 10.0

    async def chat(self, request: web.Request) -> web.Response:
        body = msgspec.json.decode(await request.read())
        if self.latency:
            slow = self.slow_share and self.rng.random() < self.slow_share
            await asyncio.sleep(self.latency * (self.slow_factor if slow else 1.0))
        response = await offline_policy(_params(body))
        content = "".join(
            part.text
            for item in response.output
            if item.kind == "message" and isinstance(item.content, list)
            for part in item.content
            if isinstance(part.text, str)
        )
        calls = [
            {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            for item in response.output
            if item.kind == "function_call"
        ]
        prompt = _tokens(_render(body) + "<|assistant|>")
        generation = _tokens(_assistant(content, calls) + _END)
        self.served += 1
        reply = {
            "id": f"chatcmpl-{self.served}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "prompt_token_ids": prompt,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content or None, "tool_calls": calls},
                    "finish_reason": "tool_calls" if calls else "stop",
                    "token_ids": generation,
                    "logprobs": {
                        "content": [{"token": f"token_id:{t}", "logprob": -0.1} for t in generation]
                    },
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(generation),
                "total_tokens": len(prompt) + len(generation),
            },
        }
        return web.Response(body=msgspec.json.encode(reply), content_type="application/json")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = msgspec.json.decode(await request.read())
        tokens = _tokens(_render(body) + ("<|assistant|>" if body.get("add_generation_prompt") else ""))
        reply = {"tokens": tokens, "count": len(tokens), "max_model_len": 1 << 20}
        return web.Response(body=msgspec.json.encode(reply), content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/tokenize", self.tokenize)
        return app


def _tokens(text: str) -> list[int]:
    return list(text.encode())


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _assistant(content: str, calls: list[dict[str, Any]]) -> str:
    return content + "".join(
        f"<call>{call['function']['name']} {call['function']['arguments']}</call>" for call in calls
    )


def _render(body: dict[str, Any]) -> str:
    tools = body.get("tools")
    parts = [f"<|tools|>{json.dumps(tools, sort_keys=True)}{_END}"] if tools else []
    for message in body.get("messages", []):
        role = message.get("role", "user")
        if role == "assistant":
            text = _assistant(_text(message.get("content")), message.get("tool_calls") or [])
        else:
            text = _text(message.get("content"))
        parts.append(f"<|{role}|>{text}{_END}")
    return "".join(parts)


def _params(body: dict[str, Any]) -> ResponsesCreateParams:
    """The chat request as the Responses request the offline policy reads."""
    items: list[Item] = []
    for message in body.get("messages", []):
        role, text = message.get("role", "user"), _text(message.get("content"))
        if role == "tool":
            items.append(
                Item(type="function_call_output", call_id=message.get("tool_call_id", ""), output=text)
            )
        elif role == "assistant":
            if text:
                items.append(
                    Item(
                        type="message", role="assistant", content=[ContentPart(type="output_text", text=text)]
                    )
                )
            for call in message.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    Item(
                        type="function_call",
                        name=function["name"],
                        arguments=function["arguments"],
                        call_id=call["id"],
                    )
                )
        else:
            items.append(Item(type="message", role=role, content=text))
    tools = [
        Tool(
            name=tool["function"]["name"],
            description=tool["function"].get("description"),
            parameters=tool["function"].get("parameters"),
        )
        for tool in body.get("tools") or []
    ]
    return ResponsesCreateParams(input=items, tools=tools, model="stub")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    parser.add_argument("--slow-share", type=float, default=0.0, help="share of responses that are slower")
    parser.add_argument("--slow-factor", type=float, default=10.0, help="how much slower those are")
    args = parser.parse_args()
    stub = VLLMStub(args.latency)
    stub.slow_share, stub.slow_factor = args.slow_share, args.slow_factor
    web.run_app(stub.app(), host="127.0.0.1", port=args.port, backlog=16384, access_log=None, print=None)


if __name__ == "__main__":
    main()
