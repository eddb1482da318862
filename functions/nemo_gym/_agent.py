"""A NeMo Gym agent server, unchanged, as a GymBus agent.

`open_agent(server, agent, models)` builds (or reuses) the agent's virtual environment,
starts the shims it calls (its resources server's, in front of the environment on the
bus, and one per model it names, its policy among them), starts the agent process as NeMo
Gym starts it (`python app.py`, `run_webserver()`, its global config pointing each name at
a shim) and yields a `HostedAgent`, whose `run` is the GymBus agent function: it posts the
task row to the agent's `/run` and returns the row the agent answers with (the task row's
fields, then the agent's), tagged so the agent's calls are made as this rollout's
(`_rollouts`).

A rollout is durable as any other: if the agent process dies, its rollouts in flight raise
`AgentUnavailable` (the bus gives their tasks back to the queue: another worker runs them)
and the worker stops serving the agent, as it does for a dead resources server. A call the
rollout lost on the bus (a tool call whose worker died) makes it start over, as GymBus's
own agents do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gymbus.schemas import DEFAULT_TIMEOUTS, GymError, Timeouts, UpstreamFailed

from .._spec import Agent, AgentUnavailable, Calls, Models
from ._config import AgentConfig, ServerConfig, agent_config
from ._http import ServerClient, ServerGone
from ._process import ServerProcess
from ._resources_shim import ResourcesShim
from ._rollouts import COOKIE, Rollouts, tag, untag
from ._shim import ModelShims
from ._venv import requirements_of, virtual_env

__all__ = ["HostedAgent", "agent_directory", "open_agent"]

log = logging.getLogger("gymbus.nemo_gym")


@dataclass
class HostedAgent:
    """A running NeMo Gym agent server of `environment`, its rollouts in `rollouts`."""

    name: str
    kind: str
    environment: str
    process: ServerProcess
    client: ServerClient
    rollouts: Rollouts
    timeouts: Timeouts = DEFAULT_TIMEOUTS

    def spec(self, max_steps: int) -> Agent:
        """The GymBus agent: served as `name`, on the task queue and its run subject."""
        return Agent(
            name=self.name, rollout=self.run, environment=self.environment, max_steps=max_steps,
            description=f"NeMo Gym's {self.kind} over {self.environment}, unchanged",
        )  # fmt: skip

    async def run(self, row: bytes, calls: Calls, max_steps: int) -> bytes:
        """One rollout of `row`, by the agent process (`max_steps` is its config's)."""
        token, rollout = self.rollouts.start(calls)
        try:
            try:
                tagged = tag(row, token)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise UpstreamFailed(f"{self.name}: the row is not a JSON object: {exc}") from None
            reply = await self._post(tagged, token)
        except GymError:
            if rollout.lost is not None:
                raise rollout.lost from None
            raise
        finally:
            self.rollouts.end(token)
        if rollout.lost is not None:  # the agent carried on past a lost call: its row cannot be trusted
            raise rollout.lost
        try:
            return untag(reply, row)
        except (msgspec.DecodeError, msgspec.ValidationError):
            message = f"NeMo Gym agent {self.name} answered /run with something not a row"
            raise UpstreamFailed(message) from None

    async def _post(self, body: bytes, token: str) -> bytes:
        try:
            reply = await self.client.post("/run", body, token, self.timeouts.rollout, None)
        except ServerGone as exc:
            code = await self._exit_code(self.timeouts.nemo_gym_exit)
            if code is not None:
                raise AgentUnavailable(
                    f"NeMo Gym agent {self.name} exited with code {code}; its log is {self.process.log}"
                ) from None
            raise UpstreamFailed(f"NeMo Gym agent {self.name} did not answer /run: {exc}") from None
        return reply.body

    async def _exit_code(self, within: float) -> int | None:
        """The agent process's exit code, if it exits within `within` seconds (a dropped
        connection is often the first sign of its death)."""
        try:
            return await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            return None

    async def exited(self) -> str:
        """Wait until the agent process exits; why, with its log's tail."""
        code = await self.process.wait()
        log_path, tail = self.process.log, self.process.tail()
        return f"NeMo Gym agent {self.name} exited with code {code}; its log is {log_path}:\n{tail}"


def agent_directory(server: ServerConfig, kind: str, site_packages: Path) -> Path:
    """Where the agent `kind` lives: beside a user's server, in their Gym checkout
    (`<root>/responses_api_agents/<kind>`), else in the NeMo Gym package."""
    own = server.directory.parent.parent / "responses_api_agents" / kind
    in_checkout = server.directory.parent.name == "resources_servers" and "site-packages" not in own.parts
    if in_checkout and own.is_dir():
        return own
    return site_packages / "responses_api_agents" / kind


@asynccontextmanager
async def open_agent(
    server: ServerConfig,
    agent: AgentConfig,
    site_packages: Path,
    models: Models,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> AsyncIterator[HostedAgent]:
    """The agent `agent` of `server`, running and hosted, until the context ends;
    `UpstreamFailed` naming its log if it cannot start."""
    directory = agent_directory(server, agent.kind, site_packages)
    entrypoint = str(agent.block.get("entrypoint") or "app.py")
    if not (directory / entrypoint).is_file():
        raise UpstreamFailed(f"NeMo Gym has no agent {agent.kind!r} (no {directory / entrypoint})")
    env = await asyncio.to_thread(virtual_env, requirements_of(directory), agent.name, directory)
    if "site-packages" in directory.parts:
        directory = env.site_packages() / "responses_api_agents" / agent.kind
    rollouts = Rollouts()
    shims = ModelShims(models, rollouts)
    resources = ResourcesShim(server.name, rollouts)
    process: ServerProcess | None = None
    client: ServerClient | None = None
    try:
        ports = await shims.start(agent.models)
        config = agent_config(server, agent, ports, await resources.start())
        process = ServerProcess(agent.name, env, directory / entrypoint, agent.name, config)
        info = await process.start(timeouts.nemo_gym_start)
        client = ServerClient(agent.name, info.port, COOKIE)
        log.info("NeMo Gym agent %s (%s) live on port %d", agent.name, info.class_, info.port)
        yield HostedAgent(agent.name, agent.kind, server.name, process, client, rollouts, timeouts)
    finally:
        if client is not None:
            await client.close()
        if process is not None:
            process.stop()
        await resources.stop()
        await shims.stop()
