"""Finding live functions through the NATS Services API (`$SRV.INFO`, `$SRV.STATS`).

nats-py has no discovery client; a request to a `$SRV` subject is answered by every
service instance, so we gather replies on an inbox for a short window.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.aio.msg import Msg
from nats.micro.service import ServiceInfo, ServiceStats

from gymbus.schemas import DEFAULT_TIMEOUTS, BusUnavailable, NoResponders, RequestTimeout

from ..cluster import Connection
from ..wire import request, subjects

__all__ = [
    "QueueDepth",
    "ServiceInfo",
    "ServiceStats",
    "is_served",
    "model_servers",
    "served_agents",
    "served_subjects",
    "service_infos",
    "service_stats",
    "task_queues",
    "unserved",
    "served_within",
    "wait_served",
]

log = logging.getLogger("gymbus.discovery")


async def _gather(conn: Connection, subject: str, window: float) -> list[dict[str, Any]]:
    replies: list[dict[str, Any]] = []

    async def collect(msg: Msg) -> None:
        try:
            replies.append(json.loads(msg.data))
        except ValueError:
            pass  # not a Services API reply; ignore it

    inbox = conn.client.new_inbox()
    sub = await conn.client.subscribe(inbox, cb=collect)
    try:
        await conn.client.publish(subject, b"", reply=inbox)
        await asyncio.sleep(window)
    finally:
        await sub.unsubscribe()
    return replies


async def service_infos(
    conn: Connection, name: str | None = None, window: float = DEFAULT_TIMEOUTS.discovery
) -> list[ServiceInfo]:
    """INFO of every live service instance (of `name` only, if given)."""
    return [ServiceInfo.from_dict(r) for r in await _gather(conn, subjects.service_info(name), window)]


async def service_stats(
    conn: Connection, name: str | None = None, window: float = DEFAULT_TIMEOUTS.discovery
) -> list[ServiceStats]:
    """STATS of every live service instance (of `name` only, if given)."""
    return [ServiceStats.from_dict(r) for r in await _gather(conn, subjects.service_stats(name), window)]


async def served_subjects(conn: Connection, window: float = DEFAULT_TIMEOUTS.discovery) -> set[str]:
    """Every subject some live service serves."""
    return {
        endpoint.subject for info in await service_infos(conn, window=window) for endpoint in info.endpoints
    }


async def served_agents(conn: Connection, window: float = DEFAULT_TIMEOUTS.discovery) -> dict[str, str]:
    """Every live agent, with the environment it drives (its service's `environment`)."""
    return {
        info.name: info.metadata["environment"]
        for info in await service_infos(conn, window=window)
        if (info.metadata or {}).get("kind") == "agent" and (info.metadata or {}).get("environment")
    }


async def model_servers(
    conn: Connection, agents: set[str], window: float = DEFAULT_TIMEOUTS.discovery
) -> dict[str, set[str]]:
    """The inference servers behind the models `agents` call (each agent's service's
    `model`): `{model: server URLs}`, as the live model services list them (`servers`;
    credentials redacted). A model no live service serves is left out; one whose adapter
    has no server (the offline policy) maps to an empty set."""
    infos = await service_infos(conn, window=window)
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


async def unserved(
    conn: Connection, agents: set[str], window: float = DEFAULT_TIMEOUTS.discovery
) -> dict[str, str]:
    """Of `agents`, those whose rollouts could not run now, each with why: no live worker
    serves the agent, its environment or the model it calls (as its service says)."""
    infos = await service_infos(conn, window=window)
    live = {info.name for info in infos}
    missing = {}
    for agent in sorted(agents):
        metadata = next((info.metadata or {} for info in infos if info.name == agent), None)
        if metadata is None:
            missing[agent] = f"no worker serves agent {agent}"
            continue
        for what in ("environment", "model"):
            name = metadata.get(what)
            if name and name not in live:
                missing[agent] = f"agent {agent}'s {what} {name} has no worker"
                break
    return missing


async def is_served(conn: Connection, service: str, timeout: float = DEFAULT_TIMEOUTS.ping) -> bool:
    """Whether some worker runs the service named `service` (`$SRV.PING.<name>`). Only no
    responders (no worker subscribed) says no: a ping answered late is a worker busy with its
    calls, not a missing one, and the server drops a frozen one within its own pings."""
    try:
        await request(conn, subjects.service_ping(service), b"", timeout=timeout)
    except NoResponders:
        return False
    except RequestTimeout:
        pass
    return True


async def served_within(
    conn: Connection,
    services: list[str],
    timeout: float,
    check: Callable[[], None] | None = None,
    *,
    say_waiting: bool = True,
) -> set[str]:
    """Which of `services` some live worker serves. One that none does yet is waited for,
    up to `timeout` seconds in all (workers started beside the caller may still be
    starting); each is asked at least once, and (`say_waiting`) the wait is logged. `check`
    is called while waiting (to raise if the workers started for them have exited)."""
    deadline = time.monotonic() + timeout
    served = set()
    for service in services:
        live = await is_served(conn, service)
        if not live and timeout > 0:
            log.log(
                logging.INFO if say_waiting else logging.DEBUG,
                "no worker serves %s yet; waiting for one",
                service,
            )
        while not live and time.monotonic() < deadline:
            if check is not None:
                check()
            await asyncio.sleep(0.02)
            live = await is_served(conn, service)
        if live:
            served.add(service)
    return served


async def wait_served(
    conn: Connection, services: list[str], timeout: float, check: Callable[[], None] | None = None
) -> None:
    """Return once every service in `services` answers a ping; `BusUnavailable` after
    `timeout`. `check` is called while waiting (see `served_within`). For workers the caller
    started: that they are still starting is no news to log ("no worker serves ...")."""
    served = await served_within(conn, services, timeout, check, say_waiting=False)
    missing = [service for service in services if service not in served]
    if missing:
        raise BusUnavailable(f"workers did not start within {timeout:.0f} s: {', '.join(missing)} not served")


@dataclass(frozen=True)
class QueueDepth:
    """An agent's task queue: waiting, being worked on, and delivered more than once."""

    agent: str
    waiting: int
    in_flight: int
    redelivered: int


async def task_queues(conn: Connection) -> list[QueueDepth]:
    """Every agent's task queue, from its durable consumer; none before the first task."""
    js = conn.js
    try:
        consumers = await js.consumers_info(subjects.TASKS_STREAM)
    except nats.js.errors.NotFoundError:
        return []
    return [
        QueueDepth(
            agent=subjects.agent_of_tasks(info.config.filter_subject or ""),
            waiting=info.num_pending or 0,
            in_flight=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
        )
        for info in consumers
    ]
