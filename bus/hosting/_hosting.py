"""Hosting: functions become services (environments, models, agents' direct subject) and
task consumers (agents' queue), all on one connection, until told to stop.

With `_rollout` (one rollout, its calls over the bus) this is all the bus knows of
functions; the functions themselves take and return msgspec structs and import nothing
of NATS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import nats.errors

from gymbus.functions import (
    Agent,
    Environment,
    Model,
    ModelFunction,
    ModelOptions,
    NoModels,
    Session,
    SessionState,
    Tool,
)
from gymbus.functions.nemo_gym import PREFIX, environment_name, is_nemo_gym
from gymbus.functions.registry import find
from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    SESSION,
    BusUnavailable,
    Limits,
    ResponsesCreateParams,
    SeedResult,
    Timeouts,
    deadline_of,
    redact_url,
)

from ..cluster import Connection
from ..connection import check_permitted, lost_for_good, open_bus
from ..policy import PolicyVersions
from ..wire import decode, encode, subjects
from ._nemo_gym import nemo_gym_servers
from ._rollout import BusModels, agent_service, rollout_task_handler
from ._services import Endpoint, Handler, ServiceHost, ServiceSpec
from ._sessions import KvSessions
from ._task_consumer import TaskConsumer
from ._threads import OffLoop, on_loop

__all__ = [
    "ServeOptions",
    "environment_service",
    "model_service",
    "serve_functions",
    "worker_role_name",
]

log = logging.getLogger("gymbus.serve")

_EMPTY_SEED = encode(SeedResult())


def environment_service(
    env: Environment,
    state: SessionState,
    conn: Connection | None = None,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    off_loop: OffLoop | None = None,
) -> ServiceSpec:
    """The environment's seed, verify and tool subjects, as one service. With `conn`, its
    functions may call models (judges) through `Session.generate`. The calls of a
    `cpu_bound` environment run in the threads of `off_loop` (the worker's, shared by all
    its environments; by default one of its own), off the loop that answers the bus."""
    threads = (off_loop or OffLoop(DEFAULT_LIMITS.cpu_bound_calls)) if env.cpu_bound else None

    def session(headers: Mapping[str, str]) -> Session:
        models = BusModels(conn, headers, timeouts) if conn is not None else NoModels()
        return Session(id=headers.get(SESSION, ""), state=state, models=models, deadline=deadline_of(headers))

    def hosted(call: Callable[[bytes, Session], Awaitable[bytes]]) -> Handler:
        async def handle(data: bytes, headers: Mapping[str, str]) -> bytes:
            if threads is None:
                return await call(data, session(headers))
            there = on_loop(session(headers), asyncio.get_running_loop())
            return await threads.run(lambda: call(data, there), env.name)

        return handle

    async def seed(data: bytes, session: Session) -> bytes:
        request = decode(data, env.seed_request, "seed request")  # validated even with no seed function
        if env.seed is not None:
            await env.seed(request, session)
        return _EMPTY_SEED

    async def verify(data: bytes, session: Session) -> bytes:
        return encode(await env.verify(decode(data, env.verify_request, "verify request"), session))

    def tool_endpoint(tool: Tool) -> Endpoint:
        async def call(data: bytes, session: Session) -> bytes:
            args: Any = decode(data, tool.args_type, f"arguments of tool {tool.name}")
            return encode(await tool.fn(args, session))

        return Endpoint(tool.name, subjects.env_tool(env.name, tool.name), hosted(call))

    endpoints = [
        Endpoint("seed", subjects.env_seed(env.name), hosted(seed)),
        Endpoint("verify", subjects.env_verify(env.name), hosted(verify)),
        *(tool_endpoint(one) for one in env.tools),
    ]
    return ServiceSpec(env.name, "environment", tuple(endpoints), env.description)


def model_service(
    name: str,
    served_as: str,
    generate: ModelFunction,
    description: str = "",
    servers: Sequence[str] = (),
) -> ServiceSpec:
    """A model adapter serving `gym.model.<served_as>.responses`.

    A request without a `prompt_cache_key` gets the rollout's session id as one: the
    Responses API's key for keeping related requests on one server's prompt cache, which is
    how an adapter over several servers keeps a rollout on one of them. `servers` (the
    inference servers it sends to) are listed in the service's metadata, credentials
    redacted: a trainer checks there that its weights reach every server its policy uses.
    """

    async def responses(data: bytes, headers: Mapping[str, str]) -> bytes:
        params = decode(data, ResponsesCreateParams, "model request")
        session = headers.get(SESSION)
        if session and not params.prompt_cache_key:
            params.prompt_cache_key = session
        return encode(await generate(params))

    endpoint = Endpoint("responses", subjects.model_responses(served_as), responses)
    metadata = {"adapter": name, "servers": ",".join(redact_url(url) for url in servers)}
    return ServiceSpec(served_as, "model", (endpoint,), description, metadata)


@dataclass(frozen=True)
class ServeOptions:
    """What to serve and how."""

    functions: tuple[str, ...]
    model: ModelOptions = field(default_factory=ModelOptions)
    served_model: str = "policy"
    """The model name agents call (`gym.model.<served_model>.responses`); several,
    comma-separated, serve the one model under each (`policy,judge_model`: the policy
    judges the NeMo Gym servers that call a judge by that name)."""
    limits: Limits = DEFAULT_LIMITS
    timeouts: Timeouts = DEFAULT_TIMEOUTS


async def serve_functions(options: ServeOptions, url: str | None, stop: asyncio.Event) -> None:
    """Host `options.functions` on one connection until `stop` is set, then drain: stop
    taking work, let what is running finish (up to `timeouts.drain`), and leave.
    Unfinished tasks are not acked, so the queue gives them to another worker."""
    nemo_gym = [name.removeprefix(PREFIX) for name in options.functions if is_nemo_gym(name)]
    # Unknown names fail before connecting, and so do an environment's bad settings
    # (GYMBUS_<ENV>), which would otherwise fail every verify.
    specs = [find(name) for name in options.functions if not is_nemo_gym(name)]
    for spec in specs:
        if isinstance(spec, Environment):
            spec.check_settings()
    role = worker_role_name(specs, options.served_model, nemo_gym)
    async with open_bus(
        url, name=f"gym-worker:{','.join(options.functions)}", timeouts=options.timeouts, role=role
    ) as bus:
        if bus.embedded is not None:
            log.info("no NATS_URL set: started nats-server at %s", bus.url)
        host = ServiceHost(bus.conn, options.timeouts)
        async with nemo_gym_servers(bus.conn, nemo_gym, stop, options.timeouts) as hosted:
            consumers, models = await _start(bus.conn, host, [*specs, *hosted.agents], options, role)
            print(f"ready: serving {', '.join(options.functions)} on {redact_url(bus.url)}", flush=True)
            await stop.wait()
            log.info("stopping: finishing in-flight work (up to %.0f s)", options.timeouts.drain)
            await _finish_unless_bus_lost(bus.conn, consumers, host, options.timeouts.reconnect_window)
            for closable in models:
                close = getattr(closable, "aclose", None)  # adapters with a connection pool, followers
                if close is not None:
                    await close()
    if hosted.failure is not None:
        raise hosted.failure


async def _finish_unless_bus_lost(
    conn: Connection, consumers: list[TaskConsumer], host: ServiceHost, window: float
) -> None:
    """Let the work in flight finish, unless the bus has been gone for `window` seconds:
    then no result of it can be sent (the tasks go to other workers once it is back)."""

    async def finish() -> None:
        await asyncio.gather(*(consumer.stop() for consumer in consumers))
        await host.stop()

    finishing = asyncio.create_task(finish())
    lost = asyncio.create_task(lost_for_good(conn, window))
    try:
        await asyncio.wait({finishing, lost}, return_when=asyncio.FIRST_COMPLETED)
        if not finishing.done():
            log.warning("the bus has been gone for %g s: stopping without the work in flight", window)
    finally:
        for task in (finishing, lost):
            task.cancel()
        await asyncio.gather(finishing, lost, return_exceptions=True)


def worker_role_name(
    specs: list[Environment | Model | Agent], served_model: str = "policy", nemo_gym: list[str] | None = None
) -> str:
    """The role (`gym-runner secure` credentials) a worker hosting `specs` (and the NeMo
    Gym servers `nemo_gym`) needs."""
    names = [f"nemo-gym-{environment_name(target)}" for target in nemo_gym or ()]
    for spec in specs:
        if isinstance(spec, Environment):
            names.append(f"env-{spec.name}")
        elif isinstance(spec, Agent):
            names.append(f"agent-{spec.name}")
        else:
            names.extend(f"model-{name}" for name in served_names(served_model))
    return " + ".join(dict.fromkeys(names))


def served_names(served_model: str) -> list[str]:
    """The names in `--served-model` (comma-separated), each checked as a subject token."""
    names = [name.strip() for name in served_model.split(",") if name.strip()]
    return [subjects.check_name(name, "model") for name in names] or ["policy"]


async def _start(
    conn: Connection,
    host: ServiceHost,
    specs: list[Environment | Model | Agent],
    options: ServeOptions,
    role: str,
) -> tuple[list[TaskConsumer], list[object]]:
    """Start serving `specs`; `NotAuthorized` at once, naming the subjects, if the
    server does not let this role serve them. Also returns what to close at the end
    (model functions, policy followers)."""
    consumers: list[TaskConsumer] = []
    models: list[object] = []
    off_loop = OffLoop(options.limits.cpu_bound_calls)  # shared: its bound is the worker's
    try:
        for spec in specs:
            if isinstance(spec, Environment):
                if spec.startup is not None:
                    # Off the loop: a start-up that imports for seconds would stall the
                    # connection's pings and lose it before the worker served anything.
                    await asyncio.to_thread(spec.startup)
                state = await KvSessions.open(conn, spec.name, options.timeouts.session_ttl)
                served = environment_service(spec, state, conn, options.timeouts, off_loop)
                await host.add(served)
            elif isinstance(spec, Model):
                models.extend(await _start_model(conn, host, spec, options, role))
                continue
            else:
                handler = rollout_task_handler(conn, spec, options.timeouts)
                consumer = TaskConsumer(conn, spec.name, handler, options.limits, options.timeouts)
                served = agent_service(conn, spec, options.timeouts)
                await host.add(served, reporting=[consumer])
                await consumer.start()
                consumers.append(consumer)
            await check_permitted(conn, [endpoint.subject for endpoint in served.endpoints], role)
    except (TimeoutError, nats.errors.Error) as exc:
        await check_permitted(conn, None, role)  # a refused JetStream request only times out
        raise BusUnavailable(f"could not start serving {spec.name}: {type(exc).__name__}: {exc}") from None
    return consumers, models


async def _start_model(
    conn: Connection, host: ServiceHost, spec: Model, options: ServeOptions, role: str
) -> list[object]:
    """Serve the model `spec` under each served name; returns what to close at the end (the
    model function, its policy follower)."""
    models: list[object] = []
    model_options = options.model
    if spec.follows_policies:
        # Each call of a policy under training names its current version.
        versions = await PolicyVersions.start(conn, options.timeouts)
        models.append(versions)
        model_options = replace(model_options, policy_versions=versions.version)
    # Off the loop, as an environment's start-up: building an adapter imports
    # its SDK (openai's took 3.6 s on a busy two-core machine), which would
    # miss the server's pings and lose the connection before serving a call.
    generate = await asyncio.to_thread(spec.make, model_options)
    models.append(generate)
    for name in served_names(options.served_model):
        served = model_service(spec.name, name, generate, spec.description, options.model.servers)
        await host.add(served)
        await check_permitted(conn, [endpoint.subject for endpoint in served.endpoints], role)
    return models
