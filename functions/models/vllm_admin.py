"""A vLLM server's adapter endpoints: which LoRA adapters it holds, loading and unloading
them, and the limits it was started with. Plain HTTP; the bus side (`gym-runner
sync-adapters`) decides what to load.

The server must be started with `--enable-lora` (and `--max-lora-rank`, `--max-loras`) and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`; with `VLLM_SERVER_DEV_MODE=1` it also tells its
limits (`/server_info`), which a trainer checks before its first step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from gymbus.schemas import DEFAULT_TIMEOUTS, redact_url

__all__ = ["AdapterRefused", "ServerLimits", "ServerUnreachable", "VllmAdmin"]


class ServerUnreachable(Exception):
    """The server refused the connection, dropped it, or did not answer in time."""


class AdapterRefused(Exception):
    """The server answered a load or unload with an error; the message says its answer."""


@dataclass(frozen=True)
class ServerLimits:
    """What a server was started with (`None` where it does not say)."""

    max_lora_rank: int | None
    max_loras: int | None
    max_model_len: int | None


class _ModelCard(msgspec.Struct):
    id: str
    parent: str | None = None
    max_model_len: int | None = None


class _ModelCards(msgspec.Struct):
    data: list[_ModelCard]


_cards = msgspec.json.Decoder(_ModelCards)
_encode = msgspec.json.Encoder().encode


class VllmAdmin:
    """One vLLM server's adapter endpoints; `url` is its root or its `/v1` URL."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUTS.adapter_http) -> None:
        self.root = url.rstrip("/").removesuffix("/v1")
        self.where = redact_url(self.root)
        self.timeout = timeout
        self._http: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout, sock_connect=DEFAULT_TIMEOUTS.model_connect)
            self._http = aiohttp.ClientSession(timeout=timeout)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        data = None if body is None else _encode(body)
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._client().request(method, self.root + path, data=data, headers=headers) as reply:
                return reply.status, await reply.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServerUnreachable(f"{self.where}: {type(exc).__name__}: {exc}") from None

    async def adapters(self) -> list[str]:
        """The names of the LoRA adapters the server holds (its models with a parent)."""
        return [card.id for card in (await self._cards()).data if card.parent is not None]

    async def _cards(self) -> _ModelCards:
        status, content = await self._call("GET", "/v1/models")
        if status != 200:
            raise ServerUnreachable(f"{self.where}/v1/models answered HTTP {status}")
        try:
            return _cards.decode(content)
        except msgspec.DecodeError as exc:
            raise ServerUnreachable(f"{self.where}/v1/models sent an unexpected reply: {exc}") from None

    async def limits(self) -> ServerLimits:
        """The server's LoRA limits and context length; `None` for what it does not tell."""
        cards = (await self._cards()).data
        length = next((card.max_model_len for card in cards if card.parent is None), None)
        status, content = await self._call("GET", "/server_info?config_format=json")
        if status != 200:
            return ServerLimits(None, None, length)
        try:
            lora = (msgspec.json.decode(content).get("vllm_config") or {}).get("lora_config") or {}
        except (msgspec.DecodeError, AttributeError):
            lora = {}
        rank, slots = lora.get("max_lora_rank"), lora.get("max_loras")
        return ServerLimits(
            rank if isinstance(rank, int) else None, slots if isinstance(slots, int) else None, length
        )

    async def load(self, name: str, path: str) -> None:
        """Load the adapter in directory `path` (on the server's disk) as `name`."""
        status, content = await self._call(
            "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path, "load_inplace": False}
        )
        if status == 404:
            raise AdapterRefused(
                f"{self.where} does not load adapters at run time: start it with --enable-lora and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
            )
        if status != 200:
            raise AdapterRefused(f"{self.where} refused adapter {name}: HTTP {status}: {_text(content)}")

    async def unload(self, name: str) -> None:
        """Unload adapter `name`; one the server does not hold is not an error."""
        status, content = await self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if status not in (200, 404):
            raise AdapterRefused(
                f"{self.where} did not unload adapter {name}: HTTP {status}: {_text(content)}"
            )


def _text(content: bytes) -> str:
    return content.decode(errors="replace")[:300]
