"""The servers the front stands up, and the global config dict NeMo Gym's clients read.

NeMo Gym reaches a server by name at `http://{host}:{port}` from the head server's config
(`cfg[name][<kind>][<implementation>]`), with no path prefix, and a `/verify` or an
agent's `/v1/responses` does not say which environment or agent it is for. So each
fronted server gets its own port (one process, one listening socket each), and its
routes know whose they are. NeMo Gym 0.7.0 sends rows to an environment server in front
of each agent, never to the agent: each agent `X` gets `X_environment_server`
(`environment_servers.legacy_agent`, naming `X`), as NeMo Gym's own config parser adds.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gymbus.bus.front import ServedAgent

__all__ = ["FrontServer", "Layout", "bind"]

KINDS = ("environment_servers", "responses_api_agents", "resources_servers", "responses_api_models")

HEAD = "head_server"
IMPLEMENTATION = "gymbus"
"""The implementation name of the agents and models the front lists (NeMo Gym's own are
`simple_agent`, ...), and of the servers NeMo Gym starts from GymBus's config (their directory
under `nemo_gym_root/`)."""
RELAY = "legacy_agent"
"""The environment servers' implementation: NeMo Gym's name for a `/run` that takes a row and
answers the agent's rollout, which NeMo Gym stamps on each result (`_ng_result_type`)."""


@dataclass(frozen=True)
class FrontServer:
    """One server NeMo Gym's clients see: its config name, kind and what it fronts."""

    name: str
    kind: str
    """`head`, `environment_servers`, `responses_api_agents`, `resources_servers` or
    `responses_api_models`."""
    target: str
    """The agent, environment or model on the bus it stands for ("" for the head)."""
    sock: socket.socket = field(compare=False)
    """Its listening socket, bound when planned (so its port is known before it serves)."""
    agent: ServedAgent | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])


def bind(host: str, port: int = 0) -> socket.socket:
    """A listening TCP socket on `host:port` (0: a free port), bound now so its port is known."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.setblocking(False)
    return sock


@dataclass(frozen=True)
class Layout:
    """Every fronted server, bound; `config` is the dict the head server hands out."""

    host: str
    servers: tuple[FrontServer, ...]

    @classmethod
    def plan(
        cls, agents: list[ServedAgent], host: str, head_port: int, environments: Sequence[str] = ()
    ) -> Layout:
        """The head server on `head_port`, and for each agent its environment server, the
        agent, its environment (a resources server) and its model, then each of
        `environments` not listed yet (a resources server), each on a free port."""
        servers = [FrontServer(HEAD, "head", "", bind(host, head_port))]
        seen: set[str] = {HEAD}

        def add(name: str, kind: str, target: str, agent: ServedAgent | None = None) -> None:
            if name not in seen:
                seen.add(name)
                servers.append(FrontServer(name, kind, target, bind(host), agent))

        try:
            for agent in agents:
                add(f"{agent.name}_environment_server", "environment_servers", agent.name, agent)
                add(agent.name, "responses_api_agents", agent.name, agent)
                add(agent.environment, "resources_servers", agent.environment)
                add(agent.model, "responses_api_models", agent.model)
            for environment in environments:
                add(environment, "resources_servers", environment)
        except BaseException:
            for server in servers:
                server.sock.close()
            raise
        return cls(host, tuple(servers))

    @classmethod
    def from_nemo_gym(cls, config: dict[str, Any], own: str) -> Layout:
        """The servers of NeMo Gym's resolved global `config` that the front serves, bound
        at the host and port NeMo Gym gave each: its own entry `own` (readiness only), and
        every other server whose implementation is `gymbus`."""
        servers: list[FrontServer] = []
        try:
            for name, kind, implementation, instance in _instances(config):
                at = (instance["host"], instance["port"])
                if name == own:
                    servers.insert(0, FrontServer(name, "front", "", bind(*at)))
                elif implementation == IMPLEMENTATION:
                    servers.append(FrontServer(name, kind, name, bind(*at)))
        except BaseException:
            for server in servers:
                server.sock.close()
            raise
        if not servers or servers[0].name != own:
            raise ValueError(f"the config has no server named {own!r}")
        return cls(servers[0].sock.getsockname()[0], tuple(servers))

    def close(self) -> None:
        for server in self.servers:
            server.sock.close()

    @property
    def head(self) -> FrontServer:
        return self.servers[0]

    def config(self) -> dict[str, Any]:
        """NeMo Gym's global config dict for these servers."""
        config: dict[str, Any] = {HEAD: {"host": self.host, "port": self.head.port}}
        for server in self.servers[1:]:
            config[server.name] = {server.kind: {_implementation(server): self._instance(server)}}
        return config

    def _instance(self, server: FrontServer) -> dict[str, Any]:
        instance: dict[str, Any] = {"host": self.host, "port": server.port}
        agent = server.agent
        if server.kind == "environment_servers" and agent is not None:
            instance["agent_server"] = {"type": "responses_api_agents", "name": agent.name}
        elif server.kind == "responses_api_agents" and agent is not None:
            instance["resources_server"] = {"type": "resources_servers", "name": agent.environment}
            instance["model_server"] = {"type": "responses_api_models", "name": agent.model}
        return instance


def _implementation(server: FrontServer) -> str:
    """The implementation name a server is listed under. A resources server is listed under
    its own name, as NeMo Gym's configs list theirs (`mcqa: {resources_servers: {mcqa:
    ...}}`): Unsloth's notebooks find a verifier at `cfg[name].resources_servers[name]`."""
    if server.kind == "environment_servers":
        return RELAY
    return server.name if server.kind == "resources_servers" else IMPLEMENTATION


def _instances(config: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(name, kind, implementation, instance) of each server in a NeMo Gym config."""
    found = []
    for name, block in config.items():
        if not isinstance(block, dict) or len(block) != 1:
            continue
        ((kind, implementations),) = block.items()
        if kind in KINDS and isinstance(implementations, dict) and len(implementations) == 1:
            ((implementation, instance),) = implementations.items()
            if isinstance(instance, dict):
                found.append((str(name), str(kind), str(implementation), instance))
    return found
