"""The `openai` model adapter: any OpenAI-compatible endpoint through the `openai` SDK.

`api="responses"` forwards the request to `/responses` (OpenAI, Azure OpenAI, recent
vLLM); `api="chat"` converts to and from `/chat/completions` (vLLM, SGLang, most
providers). The request's `model` is replaced by the configured one, as NeMo Gym's
`openai_model` does.

Failures are values the caller can act on: 429, 408, 409, 5xx, timeouts and connection
errors become `UpstreamFailed` (transient: the agent retries it with jittered backoff,
counting the retries in the rollout); any other 4xx becomes `BadRequest` (retrying
cannot help). Messages never contain the API key. The SDK's own retries are off by
default (`max_retries=0`) so retries happen once, in one place. A request over the
model's context length comes back as an empty, incomplete response (the agent then
verifies what it has) rather than an error, as NeMo Gym's vLLM adapter does.

Every request key is sent as it came, except `stream` and `stream_options`: the adapter
never streams. Requests go through the SDK's generic `post` (its auth, base URL, headers
and errors) with our own JSON body, rather than `responses.create`: the typed helper
walks the whole request through the SDK's type annotations first, which measured about
0.4 ms of CPU per call, a third of the adapter's cost. The body is encoded by msgspec, not
the SDK's `json.dumps` (1.1 against 11.7 ms for a 1.2 MB conversation).

`functions.models` imports this module (and so the SDK) when the adapter is first made,
so a worker that serves other functions never loads it.
"""

from __future__ import annotations

from typing import Any

import httpx2
import msgspec
import openai

from gymbus.schemas import BadRequest, Response, ResponsesCreateParams, UpstreamFailed, redact_url

from .._spec import ModelOptions
from ._chat import ChatCompletion, chat_request, context_overflow, response_from_chat
from ._statuses import is_context_overflow, is_transient

__all__ = ["OpenAIModel", "responses_body"]

_json = msgspec.json.Encoder()
_response_decoder = msgspec.json.Decoder(Response)
_chat_decoder = msgspec.json.Decoder(ChatCompletion)


class OpenAIModel:
    """A generation function bound to one endpoint; one pooled HTTP client for all calls."""

    def __init__(self, options: ModelOptions) -> None:
        if not options.model:
            raise ValueError("the openai model adapter needs a model name (--model or POLICY_MODEL)")
        self.options = options
        self.model = options.model
        self.client = openai.AsyncOpenAI(
            base_url=options.base_url,
            api_key=options.api_key or "EMPTY",
            max_retries=options.max_retries,
            timeout=options.timeout,
            # aiohttp behind the SDK: httpx's connection pool collapses at a few hundred
            # concurrent requests (measured: 31% of ideal at 64 in flight, errors at 256).
            http_client=openai.DefaultAioHttpClient(
                limits=httpx2.Limits(
                    max_connections=options.max_connections,
                    max_keepalive_connections=options.max_connections,
                ),
                timeout=options.timeout,
            ),
        )

    async def aclose(self) -> None:
        """Close the connection pool (a worker does this when it stops)."""
        await self.client.close()

    async def __call__(self, params: ResponsesCreateParams) -> Response:
        try:
            if self.options.api == "chat":
                return await self._chat(params)
            return await self._responses(params)
        except openai.APIStatusError as exc:
            if is_context_overflow(exc.status_code, str(exc.message)):
                return context_overflow(self.model)
            message = f"model endpoint answered HTTP {exc.status_code}: {_brief(exc)}"
            if is_transient(exc.status_code):
                raise self._failed(message) from None
            raise BadRequest(self._scrub(message)) from None
        except openai.APITimeoutError:
            # The aiohttp transport reports a refused connection as a timeout too.
            raise self._failed(
                f"model endpoint {self._where()} timed out or refused the connection"
            ) from None
        except openai.APIConnectionError:
            raise self._failed(f"cannot connect to model endpoint {self._where()}") from None
        except msgspec.DecodeError as exc:
            raise self._failed(f"model endpoint sent a reply that is not a response: {exc}") from None

    async def _responses(self, params: ResponsesCreateParams) -> Response:
        body = _json.encode(responses_body(params, self.model))
        reply = await self.client.post("/responses", content=body, cast_to=httpx2.Response)
        return _response_decoder.decode(reply.content)

    async def _chat(self, params: ResponsesCreateParams) -> Response:
        body = chat_request(params, self.model)
        body.update(body.pop("extra_body", {}))
        reply = await self.client.post(
            "/chat/completions", content=_json.encode(body), cast_to=httpx2.Response
        )
        return response_from_chat(_chat_decoder.decode(reply.content))

    def _where(self) -> str:
        return redact_url(str(self.client.base_url))

    def _scrub(self, message: str) -> str:
        key = self.options.api_key
        return message.replace(key, "***") if key else message

    def _failed(self, message: str) -> UpstreamFailed:
        return UpstreamFailed(self._scrub(message))


def responses_body(params: ResponsesCreateParams, model: str) -> dict[str, Any]:
    """The `/responses` request body for `params` sent to `model`: every key set, but
    `stream` and `stream_options` (the adapter never streams)."""
    body: dict[str, Any] = msgspec.to_builtins(params)
    body["model"] = model
    body.pop("stream", None)
    body.pop("stream_options", None)
    return body


def _brief(exc: openai.APIStatusError) -> str:
    return str(exc.message)[:300]
