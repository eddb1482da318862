"""Hosting NeMo Gym servers (`gym-runner serve nemo-gym:<server>`) like any environment.

Each server is opened by `functions.nemo_gym.open_server` (its virtual environment, its
process, the shims its judges call) and served as the environment `<server>`:

    gym.env.<server>.seed                   any replica: the session is born there
    gym.env.<server>.tool.<tool>            any replica; a call whose session another
    gym.env.<server>.verify                 replica holds is forwarded to that one's
    gym.env.<server>.r.<replica>.tool.<tool>    subject below; if that replica is gone the
    gym.env.<server>.r.<replica>.verify         call fails with `SessionLost`

A call that reaches its own replica's subject is never forwarded again. The agents the
server's config declares are served too: GymBus's `simple_agent` over the server, or NeMo
Gym's own agent process (its judges' and agents' model calls reach the bus through shims
that do not wait for a model nobody serves). If a server or agent process dies, its
environment stops being served at once (so seeds go to the other replicas), the worker
drains and stops, and `serve` fails naming the process and its log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from gymbus.functions import Agent, NoModels, Session, SessionState
from gymbus.functions.nemo_gym import HostedEnvironment, SessionElsewhere, open_server
from gymbus.schemas import (
    DEFAULT_TIMEOUTS,
    SESSION,
    NoResponders,
    SessionLost,
    Timeouts,
    UpstreamFailed,
    deadline_of,
)

from ..cluster import Connection
from ..wire import request, subjects
from ._rollout import BusModels, served_and_transient
from ._services import Endpoint, Handler, ServiceHost, ServiceSpec
from ._sessions import KvSessions

__all__ = ["HostedServers", "hosted_environment_service", "nemo_gym_servers"]

log = logging.getLogger("gymbus.serve")

Call = Callable[[bytes, Session], Awaitable[bytes]]


def hosted_environment_service(
    conn: Connection, env: HostedEnvironment, state: SessionState, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> ServiceSpec:
    """The server's seed, verify and tool subjects, shared and this replica's own."""

    def served(call: Call, forward_to: Callable[[str], str] | None, timeout: float) -> Handler:
        return _handler(conn, env, state, call, forward_to, timeout)

    def tool(name: str) -> list[Endpoint]:
        async def call(data: bytes, here: Session) -> bytes:
            return await env.proxy.tool(name, data, here)

        return [
            Endpoint(name, subjects.env_tool(env.name, name),
                     served(call, lambda replica: subjects.env_replica_tool(env.name, replica, name), timeouts.tool)),
            Endpoint(f"{name}@{env.replica}", subjects.env_replica_tool(env.name, env.replica, name),
                     served(call, None, timeouts.tool)),
        ]  # fmt: skip

    def verify_subject(replica: str) -> str:
        return subjects.env_replica_verify(env.name, replica)

    endpoints = [
        Endpoint("seed", subjects.env_seed(env.name), served(env.proxy.seed, None, timeouts.seed)),
        Endpoint(
            "verify", subjects.env_verify(env.name), served(env.proxy.verify, verify_subject, timeouts.verify)
        ),
        Endpoint(
            f"verify@{env.replica}",
            verify_subject(env.replica),
            served(env.proxy.verify, None, timeouts.verify),
        ),
        *(endpoint for name in env.tools for endpoint in tool(name)),
    ]
    metadata = {**env.metadata, "agents": ",".join(agent.name for agent in env.agents)}
    return ServiceSpec(env.name, "environment", tuple(endpoints), env.description, metadata)


def _handler(
    conn: Connection,
    env: HostedEnvironment,
    state: SessionState,
    call: Call,
    forward_to: Callable[[str], str] | None,
    timeout: float,
) -> Handler:
    """`call` on this replica's sessions; a session another replica holds is forwarded to
    the subject `forward_to` names for that replica (`None`: already forwarded once)."""

    async def handle(data: bytes, headers: Mapping[str, str]) -> bytes:
        here = Session(
            id=headers.get(SESSION, ""), state=state, models=NoModels(), deadline=deadline_of(headers)
        )
        try:
            return await call(data, here)
        except SessionElsewhere as moved:
            if forward_to is None:  # already forwarded once: the record moved meanwhile
                raise SessionLost(f"session {here.id!r} of {env.name} is no longer on this replica") from None
            return await _forward(conn, forward_to(moved.replica), data, headers, timeout, env.name, here.id)

    return handle


async def _forward(
    conn: Connection,
    subject: str,
    data: bytes,
    headers: Mapping[str, str],
    timeout: float,
    env: str,
    session: str,
) -> bytes:
    """The reply of the replica that holds the session; `SessionLost` if it is gone."""
    deadline = deadline_of(headers)
    if deadline is not None:
        timeout = max(0.001, min(timeout, deadline - time.time()))
    try:
        return await request(conn, subject, data, timeout=timeout, headers=dict(headers))
    except NoResponders:
        raise SessionLost(
            f"session {session!r} of {env} lived on a replica that is gone ({subject}): its state is lost"
        ) from None


@dataclass
class HostedServers:
    """The NeMo Gym servers a worker hosts: the agents to serve over them, and why one
    died, if one did."""

    agents: list[Agent] = field(default_factory=list)
    failure: UpstreamFailed | None = None
    watchers: list[asyncio.Task[None]] = field(default_factory=list)


@asynccontextmanager
async def nemo_gym_servers(
    conn: Connection,
    targets: list[str],
    stop: asyncio.Event,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> AsyncIterator[HostedServers]:
    """Open and serve each server of `targets` until the context ends; if one dies, stop
    serving it, record why and set `stop`."""
    hosted = HostedServers()
    async with AsyncExitStack() as stack:
        try:
            for env in await _open_all(stack, conn, targets, timeouts):
                host = ServiceHost(conn, timeouts)
                stack.push_async_callback(host.stop)
                state = await KvSessions.open(conn, env.name, timeouts.session_ttl)
                await host.add(hosted_environment_service(conn, env, state, timeouts))
                hosted.agents.extend(env.agents)
                hosted.watchers.append(asyncio.create_task(_watch(env, host, hosted, stop)))
            yield hosted
        finally:
            for watcher in hosted.watchers:  # before the servers are stopped: that is no death
                watcher.cancel()


async def _open_all(
    stack: AsyncExitStack, conn: Connection, targets: list[str], timeouts: Timeouts
) -> list[HostedEnvironment]:
    """Open every server side by side (each spends seconds importing NeMo Gym); the first
    that fails stops the others, and its error is raised."""
    models = BusModels(conn, {}, timeouts, should_retry=served_and_transient)
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(stack.enter_async_context(open_server(t, models, timeouts)))
                for t in targets
            ]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


async def _watch(
    env: HostedEnvironment, host: ServiceHost, hosted: HostedServers, stop: asyncio.Event
) -> None:
    why = await env.exited()
    log.error("%s", why)
    hosted.failure = UpstreamFailed(why)
    await host.stop()  # no more seeds here: they go to the replicas still alive
    stop.set()
