"""The vLLM server TRL's adapter sync talks to, standing in front of the bus.

TRL 1.16's `AsyncGRPOTrainer`, training a PEFT model with `weight_transfer=None`, syncs the
policy as a LoRA adapter to one URL, `vllm_server_base_url`: each sync saves the adapter to
a directory and asks that server to load it as `trl-policy-v<N>`, then unloads the version
that fell out of `max_staleness`. Pointed at this relay (the rollout worker runs it in the
trainer's process, on a loopback port), every such call goes to the bus instead:

    GET  /health                 200 once some inference server of the policy is live
    GET  /server_info            the servers' LoRA limits (the smallest), for TRL's checks
    GET  /v1/models              the smallest context length, for `token_budget=None`
    POST /v1/load_lora_adapter   publish version N (`PolicyPublisher.publish`): every server
                                 loads it; answered once they have, so the trainer moves
                                 to version N only when model calls can name it
    POST /v1/unload_lora_adapter retire a version: every server unloads it

TRL's version N is the policy's version `base + N`: a trainer resumed from a checkpoint
counts from 1 again, and its versions follow its predecessor's (`PolicyPublisher.base`).
    POST /pause, /resume         nothing to do: each version has its own name, so a load
                                 never changes what an in-flight request generates from

A publish that no server could load answers 500 with the reason of each server, and TRL
stops the run with it; one that some servers did not load is a warning naming them (they
get no calls naming that version until they catch up). With `deliver=False` (the
ablation: does the loop close?) loads and unloads are accepted and go nowhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from gymbus.bus import PolicyPublisher, Published
from gymbus.schemas import GymError

__all__ = ["AdapterRelay"]

log = logging.getLogger("gymbus.trainer")

_VERSION = re.compile(r"-v(\d+)$")
_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
_UNKNOWN_LIMIT = 1 << 16
"""What the relay tells TRL of a limit no server told (started without VLLM_SERVER_DEV_MODE):
the check happens at the first load instead, which fails naming the server."""


class AdapterRelay:
    """An HTTP server on `127.0.0.1` answering TRL's adapter sync through `publisher`."""

    def __init__(self, publisher: PolicyPublisher, *, deliver: bool = True) -> None:
        self.publisher = publisher
        self.deliver = deliver
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.published: list[int] = []
        """Versions published so far, in order (the policy's numbering)."""
        self.outcomes: list[Published] = []
        """Which servers loaded each version delivered, and which did not (why)."""

    async def start(self) -> str:
        """Listen on a free loopback port; the base URL to give TRL."""
        app = web.Application()
        app.add_routes(
            [
                web.get("/health", self._health),
                web.get("/server_info", self._server_info),
                web.get("/v1/models", self._models),
                web.post("/v1/load_lora_adapter", self._load),
                web.post("/v1/unload_lora_adapter", self._unload),
                web.post("/pause", self._nothing),
                web.post("/resume", self._nothing),
            ]
        )
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _health(self, request: web.Request) -> web.Response:
        live = [report.server for report in self.publisher.servers() if report.healthy]
        if live or not self.deliver:  # delivering nothing, it needs no server
            return web.json_response({"servers": live})
        return web.json_response(
            {"error": f"no inference server of policy {self.publisher.name} is live: start "
             "`gym-runner sync-adapters` beside each vLLM server"},
            status=503,
        )  # fmt: skip

    async def _server_info(self, request: web.Request) -> web.Response:
        reports = self.publisher.servers()
        unknown = [
            report.server for report in reports if report.max_lora_rank is None or report.max_loras is None
        ]
        if unknown:
            log.warning("servers %s do not tell their LoRA limits (start vLLM with VLLM_SERVER_DEV_MODE=1): "
                        "they are checked at the first load", ", ".join(unknown))  # fmt: skip
        lora = {
            "max_lora_rank": _smallest(report.max_lora_rank for report in reports),
            "max_loras": _smallest(report.max_loras for report in reports),
        }
        # Each server loads every version itself: several of them are not vLLM's data
        # parallelism, whose replicas an HTTP load would reach only one of.
        config = {"lora_config": lora, "parallel_config": {"data_parallel_size": 1}, "model_config": {}}
        return web.json_response({"vllm_config": config})

    async def _models(self, request: web.Request) -> web.Response:
        lengths = [report.max_model_len for report in self.publisher.servers() if report.max_model_len]
        if not lengths:
            return web.json_response({"error": "no live server tells its context length"}, status=503)
        return web.json_response(
            {"object": "list", "data": [{"id": self.publisher.name, "max_model_len": min(lengths)}]}
        )

    async def _load(self, request: web.Request) -> web.Response:
        body = await _json(request)
        name, path = str(body.get("lora_name", "")), str(body.get("lora_path", ""))
        number = _version_of(name)
        if number is None:
            return _error(400, f"adapter name {name!r} does not end in -v<version>")
        version = self.publisher.base + number
        if not self.deliver:
            self.published.append(version)
            return web.Response(text="")
        try:
            files = await asyncio.to_thread(_read_adapter, Path(path))
            outcome = await self.publisher.publish(version, files, _rank(files))
        except (OSError, ValueError) as exc:
            return _error(400, f"adapter {name} could not be read from {path}: {exc}")
        except GymError as exc:
            return _error(500, str(exc))
        self.published.append(version)
        self.outcomes.append(outcome)
        return web.Response(text="")

    async def _unload(self, request: web.Request) -> web.Response:
        number = _version_of(str((await _json(request)).get("lora_name", "")))
        if number is not None and self.deliver:
            await self.publisher.retire(self.publisher.base + number)
        return web.Response(text="")

    async def _nothing(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


def _smallest(values: Any) -> int:
    known = [value for value in values if isinstance(value, int)]
    return min(known) if known else _UNKNOWN_LIMIT


def _version_of(name: str) -> int | None:
    match = _VERSION.search(name)
    return int(match.group(1)) if match else None


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _read_adapter(directory: Path) -> dict[str, bytes]:
    """The adapter files of `directory`; `ValueError` if it has no `adapter_config.json`."""
    files = {name: (directory / name).read_bytes() for name in _FILES if (directory / name).exists()}
    if "adapter_config.json" not in files:
        raise ValueError("no adapter_config.json there")
    return files


def _rank(files: dict[str, bytes]) -> int:
    config = json.loads(files["adapter_config.json"])
    ranks = [config.get("r", 0), *(config.get("rank_pattern") or {}).values()]
    return int(max(ranks))
