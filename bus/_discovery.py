"""Finding live functions through the NATS Services API (`$SRV.INFO`, `$SRV.STATS`).

nats-py has no discovery client; a request to a `$SRV` subject is answered by every
service instance, so we gather replies on an inbox for a short window.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.micro.service import ServiceInfo, ServiceStats

from gymbus.schemas import DEFAULT_TIMEOUTS

from . import _subjects as subjects

__all__ = ["model_servers", "served_agents", "served_subjects", "service_infos", "service_stats"]


async def _gather(nc: Client, subject: str, window: float) -> list[dict[str, Any]]:
    replies: list[dict[str, Any]] = []

    async def collect(msg: Msg) -> None:
        try:
            replies.append(json.loads(msg.data))
        except ValueError:
            pass  # not a Services API reply; ignore it

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(subject, b"", reply=inbox)
        await asyncio.sleep(window)
    finally:
        await sub.unsubscribe()
    return replies


async def service_infos(
    nc: Client, name: str | None = None, window: float = DEFAULT_TIMEOUTS.discovery
) -> list[ServiceInfo]:
    """INFO of every live service instance (of `name` only, if given)."""
    return [ServiceInfo.from_dict(r) for r in await _gather(nc, subjects.service_info(name), window)]


async def service_stats(
    nc: Client, name: str | None = None, window: float = DEFAULT_TIMEOUTS.discovery
) -> list[ServiceStats]:
    """STATS of every live service instance (of `name` only, if given)."""
    return [ServiceStats.from_dict(r) for r in await _gather(nc, subjects.service_stats(name), window)]


async def served_subjects(nc: Client, window: float = DEFAULT_TIMEOUTS.discovery) -> set[str]:
    """Every subject some live service serves."""
    return {
        endpoint.subject for info in await service_infos(nc, window=window) for endpoint in info.endpoints
    }


async def served_agents(nc: Client, window: float = DEFAULT_TIMEOUTS.discovery) -> dict[str, str]:
    """Every live agent, with the environment it drives (its service's `environment`)."""
    return {
        info.name: info.metadata["environment"]
        for info in await service_infos(nc, window=window)
        if (info.metadata or {}).get("kind") == "agent" and (info.metadata or {}).get("environment")
    }


async def model_servers(
    nc: Client, agents: set[str], window: float = DEFAULT_TIMEOUTS.discovery
) -> dict[str, set[str]]:
    """The inference servers behind the models `agents` call (each agent's service's
    `model`): `{model: server URLs}`, as the live model services list them (`servers`;
    credentials redacted). A model no live service serves is left out; one whose adapter
    has no server (the offline policy) maps to an empty set."""
    infos = await service_infos(nc, window=window)
    models = {
        (info.metadata or {}).get("model")
        for info in infos
        if (info.metadata or {}).get("kind") == "agent" and info.name in agents
    }
    servers: dict[str, set[str]] = {}
    for info in infos:
        metadata = info.metadata or {}
        if metadata.get("kind") == "model" and info.name in models:
            listed = servers.setdefault(info.name, set())
            listed.update(url for url in metadata.get("servers", "").split(",") if url)
    return servers
