"""A NeMo Gym resources server, opened: installed, started, and proxied as an environment.

`open_server("mcqa", models)` finds the server, builds or reuses its virtual environment,
starts the model shims its config names, starts the server on a loopback port and yields
a `HostedEnvironment`: the proxy's seed, tool and verify functions, the tools the server
offers, this replica's id and the agents its config declares. Its `simple_agent`s are
GymBus's own simple agent; an agent of any other kind (`gymnasium_agent`,
`tool_simulation_agent`, ...) runs unchanged in its own process (`_agent`). An agent that
cannot start (it needs a key, a container) is left out, with a warning naming its log.
Leaving the context stops the agents, the server and the shims.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, BadRequest, GymError, Timeouts

from .._spec import Agent, Models
from ..agents import AGENT_KINDS
from ..environments._settings import settings_variable
from ._agent import HostedAgent, agent_directory, open_agent
from ._config import AgentConfig, ServerConfig, global_config, model_names, read_config, settings_of
from ._http import ServerClient
from ._process import ServerInfo, ServerProcess
from ._proxy import Proxy
from ._shim import ModelShims, bus_model_name
from ._venv import pinned, requirements_of, virtual_env

__all__ = [
    "OWN_AGENTS",
    "PREFIX",
    "HostedEnvironment",
    "ServerOutline",
    "environment_name",
    "is_nemo_gym",
    "locate",
    "open_server",
    "outline",
    "prepare",
]

log = logging.getLogger("gymbus.nemo_gym")

PREFIX = "nemo-gym:"
"""What names a NeMo Gym server among the functions `gym-runner serve` takes."""
OWN_AGENTS = ("simple_agent",)
"""NeMo Gym agent kinds GymBus runs with its own agent; others run as NeMo Gym's."""
_EXAMPLE_ROWS = 100
_BUILT_IN = {"/seed_session", "/verify", "/aggregate_metrics", "/close_session", "/reset"}
"""POST routes of a resources server that are not tools (`/reset` seeds a Gymnasium server)."""


def is_nemo_gym(function: str) -> bool:
    return function.startswith(PREFIX)


@dataclass(frozen=True)
class HostedEnvironment:
    """A running NeMo Gym server, as an environment with byte-level seed, tool and verify."""

    name: str
    replica: str
    """This server process's id: sessions it seeded are served only by it."""
    tools: tuple[str, ...]
    proxy: Proxy
    agents: tuple[Agent, ...] = ()
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    process: ServerProcess | None = None
    hosted_agents: tuple[HostedAgent, ...] = ()
    """NeMo Gym's own agents, running in their processes."""

    async def exited(self) -> str:
        """Wait until the server or one of its agent processes exits; why, with its log's tail."""
        assert self.process is not None
        waits = [self._server_exited(), *(agent.exited() for agent in self.hosted_agents)]
        tasks = [asyncio.ensure_future(wait) for wait in waits]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
        return next(iter(done)).result()

    async def _server_exited(self) -> str:
        assert self.process is not None
        code = await self.process.wait()
        log_path, tail = self.process.log, self.process.tail()
        return f"NeMo Gym server {self.name} exited with code {code}; its log is {log_path}:\n{tail}"


def locate(target: str) -> tuple[Path, str | None]:
    """The server directory and config `target` names (see `_config`), building NeMo Gym's
    own environment when it names one of the package's servers."""
    path = Path(target).expanduser()
    if path.is_dir():
        return path.resolve(), None
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.resolve().parent.parent, path.stem
    name, _, config = target.partition("/")
    servers = virtual_env([pinned()], "NeMo Gym").site_packages() / "resources_servers"
    if not (servers / name / "configs").is_dir():
        known = sorted(p.name for p in servers.iterdir() if (p / "configs").is_dir())
        close = difflib.get_close_matches(name, known, n=3)
        hint = (
            f" (did you mean {', '.join(close)}?)" if close else f"; it has {len(known)}: {', '.join(known)}"
        )
        raise BadRequest(f"NeMo Gym has no resources server {name!r}, and no such directory exists{hint}")
    return servers / name, config or None


def prepare(target: str) -> Path:
    """Build (or reuse) the virtual environment of the server `target` names, and those of
    the agents its config declares that run as NeMo Gym's; the server's path. What
    `gym-runner nemo-gym install` does ahead of a run."""
    directory, config = locate(target)
    server = read_config(directory, config)
    env = virtual_env(requirements_of(directory), server.name, directory)
    for agent in server.agents:
        found = agent_directory(server, agent.kind, env.site_packages())
        if agent.kind not in OWN_AGENTS and found.is_dir():
            virtual_env(requirements_of(found), agent.name, found)
    return env.path


@dataclass(frozen=True)
class ServerOutline:
    """What hosting a server needs on a locked bus, read from its config without starting it:
    its environment's name, the agents served with it, and the models (by their names on the
    bus) that the server's judges and those agents call."""

    name: str
    agents: tuple[str, ...]
    models: tuple[str, ...]


def outline(target: str) -> ServerOutline:
    """The `ServerOutline` of the server `target` names (`BadRequest` if it names none)."""
    directory, config = locate(target)
    server = read_config(directory, config)
    agents = tuple(agent.name for agent in server.agents) or (f"{server.name}_simple_agent",)
    named = {*server.models, *(name for agent in server.agents for name in agent.models)}
    models = {bus_model_name(name) for name in named} | {"policy"}  # every shim calls the policy
    return ServerOutline(server.name, agents, tuple(sorted(models)))


def environment_name(target: str) -> str:
    """The environment name `target` will serve as, without opening it (for roles)."""
    path = Path(target).expanduser()
    if path.suffix in (".yaml", ".yml"):
        return path.resolve().parent.parent.name
    return path.name if path.is_dir() else target.partition("/")[0]


@asynccontextmanager
async def open_server(
    target: str, models: Models, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> AsyncIterator[HostedEnvironment]:
    """The server `target` names, running and proxied, with its agents, until the context ends."""
    directory, config = await asyncio.to_thread(locate, target)
    server = read_config(directory, config)
    env = await asyncio.to_thread(virtual_env, requirements_of(directory), server.name, directory)
    directory = _in(env.site_packages(), directory)
    server = read_config(directory, config)
    shims = ModelShims(models)
    process: ServerProcess | None = None
    client: ServerClient | None = None
    stack = AsyncExitStack()  # the agents
    try:
        settings = settings_of(server, settings_variable(server.name))
        ports = await shims.start(model_names(settings, server.policy_aliases))  # settings may name a judge
        process = ServerProcess(
            server.name, env, server.app, server.instance, global_config(server, settings, ports)
        )
        info = await process.start(timeouts.nemo_gym_start)
        client = ServerClient(server.name, info.port, info.cookie)
        replica = uuid.uuid4().hex[:12]
        proxy = Proxy(server.name, replica, client, _down(process), timeouts, tuple(info.verify_outputs),
                      tuple(info.routes))  # fmt: skip
        log.info("NeMo Gym server %s (%s) live on port %d, replica %s",
                 server.name, info.class_, info.port, replica)  # fmt: skip
        hosted_agents = await _open_agents(stack, server, env.site_packages(), models, timeouts)
        hosted = HostedEnvironment(
            name=server.name, replica=replica, tools=_tools(info.routes, directory), proxy=proxy,
            agents=_agents(server, hosted_agents),
            description=str(server.block.get("description") or f"NeMo Gym's {server.name} resources server"),
            metadata=_metadata(server, env.path, process, info, replica), process=process,
            hosted_agents=tuple(hosted_agents),
        )  # fmt: skip
        yield hosted
    finally:
        await stack.aclose()  # the agents first: they call the server
        if client is not None:
            await client.close()
        if process is not None:
            process.stop()
        await shims.stop()


async def _open_agents(
    stack: AsyncExitStack, server: ServerConfig, site_packages: Path, models: Models, timeouts: Timeouts
) -> list[HostedAgent]:
    """Start the config's agents of other kinds than GymBus's own, side by side; one that
    cannot start is left out, with a warning that says why."""

    async def one(agent: AgentConfig) -> HostedAgent | None:
        try:
            return await stack.enter_async_context(open_agent(server, agent, site_packages, models, timeouts))
        except GymError as exc:
            log.warning("%s: not serving its agent %s (%s), which could not start: %s",
                        server.name, agent.name, agent.kind, exc)  # fmt: skip
            return None

    others = [agent for agent in server.agents if agent.kind not in OWN_AGENTS]
    started = await asyncio.gather(*(one(agent) for agent in others))
    return [agent for agent in started if agent is not None]


def _in(site_packages: Path, directory: Path) -> Path:
    """A package server's directory in the environment that runs it (a user's stays where it is)."""
    if directory.parent.name == "resources_servers" and directory.parent.parent.name == "site-packages":
        return site_packages / "resources_servers" / directory.name
    return directory


def _down(process: ServerProcess) -> Callable[[], str | None]:
    def why() -> str | None:
        code = process.process.poll() if process.process is not None else None
        return None if code is None else f"exited with code {code}"

    return why


class _Tool(msgspec.Struct):
    name: str = ""


class _Params(msgspec.Struct):
    tools: list[_Tool] = []


class _Row(msgspec.Struct):
    responses_create_params: _Params | None = None


_row = msgspec.json.Decoder(_Row)


def _tools(routes: list[str], directory: Path) -> tuple[str, ...]:
    """The server's tools: its named POST routes but seed, verify, metrics and session
    ends, and, if it has a catch-all route (`/{path}`), the tools its example rows offer
    the model."""
    named = {
        route.lstrip("/")
        for route in routes
        if "{" not in route and route.count("/") == 1 and route not in _BUILT_IN
    }
    named.discard("mcp")
    if any("{" in route for route in routes):
        named |= _example_tools(directory / "data" / "example.jsonl")
    return tuple(sorted(name for name in named if name.replace("_", "").replace("-", "").isalnum()))


def _example_tools(path: Path) -> set[str]:
    found: set[str] = set()
    if not path.exists():
        return found
    with open(path, "rb") as rows:
        for number, line in enumerate(rows):
            if number >= _EXAMPLE_ROWS:
                break
            try:
                params = _row.decode(line).responses_create_params
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            found |= {tool.name for tool in (params.tools if params else []) if tool.name}
    return found


def _agents(server: ServerConfig, hosted: list[HostedAgent]) -> tuple[Agent, ...]:
    """GymBus agents for the config's agents: its `simple_agent`s (or `<server>_simple_agent`
    if it declares none) run by GymBus's simple agent, the others as hosted."""
    steps = {agent.name: agent.max_steps or DEFAULT_LIMITS.max_steps for agent in server.agents}
    agents = [
        _simple_agent(agent.name, server.name, agent.max_steps)
        for agent in server.agents
        if agent.kind in OWN_AGENTS
    ]
    agents += [agent.spec(steps[agent.name]) for agent in hosted]
    if not server.agents:
        agents.append(_simple_agent(f"{server.name}_simple_agent", server.name, None))
    return tuple(agents)


def _simple_agent(name: str, environment: str, max_steps: int | None) -> Agent:
    return Agent(
        name=name,
        rollout=AGENT_KINDS["simple_agent"],
        environment=environment,
        max_steps=max_steps or DEFAULT_LIMITS.max_steps,
        description=f"simple_agent over the NeMo Gym server {environment}",
    )


def _metadata(
    server: ServerConfig, venv: Path, process: ServerProcess, info: ServerInfo, replica: str
) -> dict[str, str]:
    return {
        "nemo_gym_server": server.name,
        "nemo_gym_class": info.class_,
        "port": str(info.port),
        "config": str(server.config_file),
        "replica": replica,
        "venv": str(venv),
        "log": str(process.log),
    }
