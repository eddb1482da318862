"""The `vllm` model function: open models served by vLLM (or SGLang) over Chat Completions,
with token capture for training.

Requests are converted to Chat Completions (`_chat`: instructions → system, function
calls ↔ `tool_calls`, tool outputs → `tool` messages, reasoning ↔ `<think>` or the server's
reasoning field, `max_output_tokens` → `max_tokens`; audio a row carries in its metadata
as NeMo Gym's vLLM adapter reads it, `_audio`) and sent with a plain aiohttp client,
bodies encoded and decoded by msgspec: the `openai` SDK costs 0.4-0.6 ms of CPU per call,
which a training run's hot path should not pay.

Token capture (on by default, `ModelOptions.token_capture`): the last output item of each
call carries `prompt_token_ids`, `generation_token_ids` and `generation_log_probs`, read
from vLLM's `prompt_token_ids`, `choices[].token_ids` and `token_id:<id>` logprobs (prompt
ids from `/tokenize` if a server sends none). A later call of a rollout first renders the
conversation with `/tokenize`; if that extends the previous call's prompt + generation it
goes to `/v1/chat/completions` as usual, otherwise the prompt is rebuilt from the token ids
(`_tokens.continue_prompt`) and generated from directly with `/v1/completions`, its text
read in the Hermes tool-call format (`_hermes`). Either way the stitched sequence is what
the model saw. Logprobs are what the server computes (vLLM's `--logprobs-mode`, raw by
default; TRL's `vllm-serve` uses `processed_logprobs`).

Several servers: `base_url` may list several, comma-separated. A rollout sticks to one
(chosen from the request's `prompt_cache_key`, which the bus fills with the rollout's
session id, else from the conversation's start), rollouts spread across all, and a server
that refuses or drops connections is skipped for `Timeouts.model_server_down` seconds:
its rollouts continue on the others, token-exact, since later prompts are token ids.

Policy versions (asynchronous training): a request whose `metadata` names a policy under
training (`schemas.POLICY_KEY`) is sent to that policy's current version, a LoRA adapter
whose name and version are read per call from `ModelOptions.policy_versions` (its host
follows the bus); the call's last output item
records it (`policy_version`, beside the token ids), so a rollout whose calls spanned
versions says so. A server that answers that it does not hold the adapter (404) is
catching up: the call goes to another server, and that one gets no adapter calls for
`Timeouts.adapter_missing` seconds. No server holding it is `UpstreamFailed` (retried);
the base model is never used in its place.

Failures: a context-length 400 is an empty, incomplete response (the agent verifies what it
has); 408, 409, 429 and 5xx, timeouts and unreachable servers are `UpstreamFailed`
(transient: the agent's call layer retries with backoff); other 4xx and a token history
that cannot be continued are `BadRequest`; a reply without token ids while capture is on
is `FunctionFailed`. None of them ever yields a sample with wrong token ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec

from gymbus.schemas import (
    DEFAULT_TIMEOUTS,
    POLICY_KEY,
    BadRequest,
    FunctionFailed,
    Response,
    ResponsesCreateParams,
    UpstreamFailed,
    input_items,
    item_text,
    redact_url,
)

from .._spec import ModelOptions
from ._audio import with_audio
from ._chat import (
    ChatCompletion,
    ChatUsage,
    chat_request,
    context_overflow,
    response_from_chat,
    response_from_parts,
)
from ._hermes import split_tool_calls
from ._servers import Servers
from ._statuses import is_context_overflow, is_transient
from ._tokens import CallTokens, History, continue_prompt, generation_of, history_of, with_tokens

__all__ = ["VLLMModel"]

T = TypeVar("T")

_CAPTURE = {"logprobs": True, "top_logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True}
# Chat-only request keys a `metadata.extra_body` may carry; `/v1/completions` takes the rest.
_CHAT_ONLY = {"chat_template", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
              "documents", "tool_choice", "parallel_tool_calls", "reasoning_effort", "include_reasoning"}  # fmt: skip


class _CompletionLogprobs(msgspec.Struct):
    tokens: list[str] = []
    token_logprobs: list[float | None] = []


class _CompletionChoice(msgspec.Struct):
    text: str = ""
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: _CompletionLogprobs | None = None


class _Completion(msgspec.Struct):
    id: str
    choices: list[_CompletionChoice]
    model: str = ""
    created: float = 0.0
    usage: ChatUsage | None = None


class _Tokenized(msgspec.Struct):
    tokens: list[int]
    max_model_len: int | None = None


class _Model(msgspec.Struct):
    id: str


class _Models(msgspec.Struct):
    data: list[_Model]


_json = msgspec.json.Encoder()
_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(kind) for kind in (ChatCompletion, _Completion, _Tokenized, _Models)
}


class _Unreachable(Exception):
    """The server refused or dropped the connection, or did not accept one in time: try another."""


class _TimedOut(Exception):
    """The server took the request but did not answer within the call's timeout."""


class _ContextOverflow(Exception):
    """The prompt does not fit the model's context."""


class _NotServed(Exception):
    """The server answered 404: it does not serve the model (or adapter) the call named."""


@dataclass(frozen=True)
class _Adapter:
    """The adapter a call names: version `version` of a policy under training."""

    name: str
    version: int


class VLLMModel:
    """A generation function over one or more vLLM servers; one connection pool for all."""

    def __init__(self, options: ModelOptions) -> None:
        urls = options.servers
        if not urls:
            raise ValueError("the vllm model function needs a server URL (--model-url or POLICY_BASE_URL)")
        self.options = options
        self.model = options.model
        self.capture = options.token_capture
        self.servers = Servers(urls, DEFAULT_TIMEOUTS.model_server_down)
        self.headers = {"Content-Type": "application/json"}
        if options.api_key:
            self.headers["Authorization"] = f"Bearer {options.api_key}"
        self._http: aiohttp.ClientSession | None = None
        self.rebuilt_prompts = 0
        """Calls whose prompt was rebuilt from token ids (the server's rendering drifted)."""

    async def aclose(self) -> None:
        """Close the connection pool (a worker does this when it stops)."""
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:  # made in the running loop, on first use
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.options.max_connections),
                timeout=aiohttp.ClientTimeout(
                    total=self.options.timeout, sock_connect=DEFAULT_TIMEOUTS.model_connect
                ),
                headers=self.headers,
            )
        return self._http

    async def __call__(self, params: ResponsesCreateParams) -> Response:
        adapter = self._adapter(params)
        unreachable, lacking = [], []
        for url in self.servers.order(_rollout_key(params)):
            try:
                response = await self._generate(url, params, adapter)
            except _Unreachable:
                self.servers.failed(url)
                unreachable.append(redact_url(url))
                continue
            except _TimedOut:
                self.servers.failed(url)  # hung: the retry goes to another server
                raise UpstreamFailed(
                    f"model server {redact_url(url)} did not answer within {self.options.timeout:.0f} s"
                ) from None
            except _NotServed as exc:
                if adapter is None:
                    raise BadRequest(str(exc)) from None
                self.servers.failed(url, DEFAULT_TIMEOUTS.adapter_missing)  # its syncer is catching up
                lacking.append(redact_url(url))
                continue
            self.servers.answered(url)
            return response
        if lacking and adapter is not None:
            raise UpstreamFailed(
                f"no model server holds adapter {adapter.name} (version {adapter.version} of the policy under "
                f"training) yet: {', '.join(lacking)} lack it; their sync-adapters processes load it"
                + (f"; unreachable: {', '.join(unreachable)}" if unreachable else "")
            )
        raise UpstreamFailed(
            f"no model server answered (refused or dropped the connection): {', '.join(unreachable)}"
        )

    def _adapter(self, params: ResponsesCreateParams) -> _Adapter | None:
        """The adapter of the policy version the request must use, if it names a policy."""
        metadata = params.metadata if isinstance(params.metadata, dict) else {}
        policy = metadata.get(POLICY_KEY)
        if not policy:
            return None
        if self.options.policy_versions is None:
            raise BadRequest(
                f"the request names policy {policy!r} under training, but this model function follows no "
                "policy versions (serve it with `gym-runner serve vllm` on the trainer's bus)"
            )
        current = self.options.policy_versions(policy)
        if current is None:
            raise UpstreamFailed(
                f"policy {policy} has no version on its servers yet (is its trainer running?)"
            )
        return _Adapter(*current)

    async def _generate(self, url: str, params: ResponsesCreateParams, adapter: _Adapter | None) -> Response:
        model = adapter.name if adapter is not None else self.model or await self._served_model(url)
        version = adapter.version if adapter is not None else None
        body = chat_request(params, model, reasoning="think")
        body.update(body.pop("extra_body", {}))
        body = with_audio(body, params.metadata if isinstance(params.metadata, dict) else {})
        try:
            if not self.capture:
                return response_from_chat(await self._post(f"{url}/chat/completions", body, ChatCompletion))
            history = history_of(input_items(params))
            if not history.seen:
                return await self._chat(url, body, None, history, version)
            return await self._continue(url, body, history, version)
        except _ContextOverflow:
            return context_overflow(model)

    async def _continue(
        self, url: str, body: dict[str, Any], history: History, version: int | None
    ) -> Response:
        rendering = await self._tokenize(url, body)
        prompt = continue_prompt(history, rendering.tokens)
        if prompt == rendering.tokens:
            return await self._chat(url, body, prompt, history, version)
        self.rebuilt_prompts += 1
        if body.get("max_tokens") is None and rendering.max_model_len is not None:
            # As Chat Completions does; `/v1/completions` would stop at 16 tokens.
            body = {**body, "max_tokens": rendering.max_model_len - len(prompt)}
        if body.get("max_tokens", 1) <= 0:
            raise _ContextOverflow(f"the prompt fills the context ({len(prompt)} tokens)")
        return await self._complete(url, body, prompt, history, version)

    async def _chat(
        self, url: str, body: dict[str, Any], prompt: list[int] | None, history: History, version: int | None
    ) -> Response:
        """Generate with the server's own chat template; `prompt` is the rendering `/tokenize`
        gave, which the server's must equal."""
        where = f"model call {history.step} at {redact_url(url)}"
        chat = await self._post(f"{url}/chat/completions", {**body, **_CAPTURE, "n": 1}, ChatCompletion)
        if not chat.choices:
            raise UpstreamFailed(f"{where}: the server's reply has no choices")
        choice = chat.choices[0]
        _check_tool_calls_parsed(body, choice.message.content, choice.message.tool_calls, where)
        rendered = chat.prompt_token_ids
        if rendered is None:
            rendered = prompt if prompt is not None else (await self._tokenize(url, body)).tokens
        if prompt is not None and rendered != prompt:
            raise FunctionFailed(
                f"{where}: the server rendered the prompt differently than its /tokenize did"
            )
        if history.seen and rendered[: len(history.seen)] != history.seen:
            raise FunctionFailed(f"{where}: the prompt does not continue model call {history.step - 1}")
        entries = [
            (entry.token, entry.logprob) for entry in (choice.logprobs and choice.logprobs.content) or []
        ]
        generation, logprobs = generation_of(choice.token_ids, entries, where)
        return with_tokens(response_from_chat(chat), CallTokens(rendered, generation, logprobs, version))

    async def _complete(
        self, url: str, body: dict[str, Any], prompt: list[int], history: History, version: int | None
    ) -> Response:
        """Generate from the token ids of `prompt` (tokens in, tokens out)."""
        where = f"model call {history.step} at {redact_url(url)}"
        request = {key: value for key, value in body.items() if key not in _CHAT_ONLY | {"messages", "tools"}}
        request.update(prompt=prompt, max_tokens=body.get("max_tokens"), logprobs=0, n=1)
        request.update(return_token_ids=True, return_tokens_as_token_ids=True)
        completion = await self._post(f"{url}/completions", request, _Completion)
        if not completion.choices:
            raise UpstreamFailed(f"{where}: the server's reply has no choices")
        choice = completion.choices[0]
        logprob_entries = choice.logprobs or _CompletionLogprobs()
        entries = list(zip(logprob_entries.tokens, logprob_entries.token_logprobs, strict=False))
        generation, logprobs = generation_of(choice.token_ids, entries, where)
        parse_calls = body.get("tools") and body.get("tool_choice") != "none"  # as the server's parser
        content, calls = split_tool_calls(choice.text) if parse_calls else (choice.text, [])
        usage = completion.usage or ChatUsage(prompt_tokens=len(prompt), completion_tokens=len(generation))
        response = response_from_parts(
            completion.id,
            content,
            None,
            calls,
            choice.finish_reason,
            usage,
            completion.model,
            completion.created,
        )
        return with_tokens(response, CallTokens(prompt, generation, logprobs, version))

    async def _tokenize(self, url: str, body: dict[str, Any]) -> _Tokenized:
        """The server's rendering of the conversation with its chat template, as token ids."""
        request = {"model": body["model"], "messages": body["messages"], "add_generation_prompt": True}
        for key in ("tools", "chat_template_kwargs", "chat_template"):
            if key in body:
                request[key] = body[key]
        return await self._post(f"{_server_root(url)}/tokenize", request, _Tokenized)

    async def _served_model(self, url: str) -> str:
        """The model the server serves (its first), when none was configured."""
        models = await self._send("GET", f"{url}/models", None, _Models)
        if not models.data:
            raise UpstreamFailed(f"model server {redact_url(url)} serves no model")
        self.model = models.data[0].id
        return self.model

    async def _post(self, url: str, body: dict[str, Any], kind: type[T]) -> T:
        return await self._send("POST", url, _json.encode(body), kind)

    async def _send(self, method: str, url: str, data: bytes | None, kind: type[T]) -> T:
        try:
            async with self._client().request(method, url, data=data) as reply:
                status, content = reply.status, await reply.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise _Unreachable(str(exc)) from None
        except TimeoutError:
            raise _TimedOut from None
        except aiohttp.ClientConnectionError as exc:
            raise _Unreachable(str(exc)) from None
        if status == 404:
            text = content.decode(errors="replace")[:300]
            raise _NotServed(f"model server {redact_url(url)} answered HTTP 404: {text}")
        if status != 200:
            raise _status_error(status, content, url)
        try:
            decoded: T = _DECODERS[kind].decode(content)
        except msgspec.DecodeError as exc:
            raise UpstreamFailed(f"model server {redact_url(url)} sent an unexpected reply: {exc}") from None
        return decoded


def _status_error(status: int, content: bytes, url: str) -> Exception:
    text = content.decode(errors="replace")
    if is_context_overflow(status, text):
        return _ContextOverflow(text)
    message = f"model server {redact_url(url)} answered HTTP {status}: {text[:300]}"
    if is_transient(status):
        return UpstreamFailed(message)
    return BadRequest(message)


def _check_tool_calls_parsed(
    body: dict[str, Any], content: str | None, parsed: list[Any] | None, where: str
) -> None:
    """A reply whose text holds a call of an offered tool in the Hermes format, which the
    server did not turn into a tool call, came from a server without the tool-call parser
    this model writes for: the rollout would end after that turn with no tool run, and
    its reward would look like the policy's fault."""
    if parsed or not content or not body.get("tools") or body.get("tool_choice") == "none":
        return
    offered = {tool["function"]["name"] for tool in body["tools"]}
    _, calls = split_tool_calls(content)
    if any(name in offered for _, name, _ in calls):
        raise BadRequest(
            f"{where}: the model wrote a tool call the server did not parse; start vLLM with "
            "--enable-auto-tool-choice --tool-call-parser hermes (or the parser of this model's template)"
        )


def _server_root(url: str) -> str:
    """vLLM serves `/tokenize` beside `/v1`, not under it."""
    return url.removesuffix("/v1")


def _rollout_key(params: ResponsesCreateParams) -> str:
    """What keeps a rollout on one server: its `prompt_cache_key`, else its conversation's start."""
    if isinstance(params.prompt_cache_key, str) and params.prompt_cache_key:
        return params.prompt_cache_key
    items = input_items(params)
    start = item_text(items[0]) if items else ""
    instructions = params.instructions if isinstance(params.instructions, str) else ""
    return hashlib.blake2b(f"{instructions}\n{start}".encode(), digest_size=16).hexdigest()
