"""A NeMo Gym resources server's directory and config: what the bridge starts and serves.

A server is named `<server>` (one of the NeMo Gym package's `resources_servers/<server>`),
`<server>/<config>` (its `configs/<config>.yaml`, NeMo Gym's `--resources-server
NAME/flavor`), or a path: a user's server directory (`app.py`, `configs/`,
`requirements.txt`, as NeMo Gym lays them out) or one of its config files. Its config
names the resources server instance, the agents that drive it (the names datasets put
in `agent_ref`) and the model servers it calls (judges).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbus.schemas import BadRequest

from ..environments._settings import settings_variable
from ._resolve import AGENT_KIND, KINDS, MODEL_KIND, instances, resolve, unset_values

__all__ = [
    "AgentConfig",
    "ServerConfig",
    "agent_config",
    "global_config",
    "model_names",
    "read_config",
    "settings_of",
]

POLICY = "policy_model"
"""NeMo Gym's name for the policy model; served on the bus as `policy`."""


@dataclass(frozen=True)
class AgentConfig:
    """An agent a server's config declares: its kind (NeMo Gym's implementation, e.g.
    `simple_agent`), its step limit, if it sets one, and its settings (which name the
    resources server and the models it calls)."""

    name: str
    kind: str
    max_steps: int | None = None
    block: dict[str, Any] = field(default_factory=dict)
    policy_aliases: tuple[str, ...] = ()
    """Model servers of the config that are the policy (`ServerConfig.policy_aliases`)."""

    @property
    def models(self) -> tuple[str, ...]:
        """Model servers the agent calls, by their NeMo Gym name (its policy among them)."""
        return model_names(self.block, self.policy_aliases)


@dataclass(frozen=True)
class ServerConfig:
    """A resources server as its config file declares it."""

    name: str
    """The environment's name on the bus: the server's directory name (`mcqa`)."""
    directory: Path
    config_file: Path
    instance: str
    """The resources server instance's name in the config (e.g. `mcqa`, or
    `example_session_state_mgmt_resources_server`): it names NeMo Gym's session cookie."""
    block: dict[str, Any]
    """The instance's settings (`entrypoint`, `domain`, judge references, ...)."""
    agents: tuple[AgentConfig, ...] = ()
    models: tuple[str, ...] = ()
    """Model servers the resources server calls, by their NeMo Gym name."""
    extras: dict[str, Any] = field(default_factory=dict)
    """The config's top-level values that are no server (settings may interpolate them, and
    name them: `sandbox_provider: sandbox` names the top-level `sandbox`)."""
    policy_aliases: tuple[str, ...] = ()
    """The config's model servers that are the policy (a copy of `policy_model`'s config):
    their calls go to the policy, as under NeMo Gym, where they reach the same endpoint."""

    @property
    def app(self) -> Path:
        return self.directory / str(self.block.get("entrypoint") or "app.py")


def read_config(directory: Path, config: str | None = None) -> ServerConfig:
    """The config of the server in `directory`: `configs/<config>.yaml` if named, else
    `configs/<directory name>.yaml`, else its only config file, resolved as NeMo Gym resolves
    it (`_resolve`: its `config_paths`, relative to NeMo Gym's root, `_inherit_from`, ...).
    `BadRequest` naming the file if there is none, NeMo Gym would refuse it, or it declares
    no resources server."""
    path = _config_file(directory, config)
    document = resolve(path, directory.parents[1])
    instance, impl, block = _resources_server(document, directory.name, path)
    aliases = _policy_aliases(document)
    return ServerConfig(
        name=impl,
        directory=directory,
        config_file=path,
        instance=instance,
        block=block,
        agents=_agents(document, instance, aliases),
        models=model_names(block, aliases),
        extras={key: value for key, value in document.items() if not _is_instance(value)},
        policy_aliases=aliases,
    )


def _is_instance(value: Any) -> bool:
    return isinstance(value, dict) and any(kind in value for kind in KINDS)


def _policy_aliases(document: dict[str, Any]) -> tuple[str, ...]:
    """The model servers that are the policy: those whose config is a copy of the policy's
    (`simulator_model: {_copy: policy_model}`), as NeMo Gym would serve them from the same
    endpoint."""
    policy = document.get(POLICY)
    return tuple(
        sorted(
            name for name in instances(document, MODEL_KIND) if name != POLICY and document[name] == policy
        )
    )


def _config_file(directory: Path, config: str | None) -> Path:
    if not (directory / "configs").is_dir():
        raise BadRequest(f"{directory} is not a NeMo Gym resources server: it has no configs/ folder")
    if config is not None:
        path = directory / "configs" / f"{config.removesuffix('.yaml')}.yaml"
        if not path.exists():
            raise BadRequest(f"{directory} has no config {path.name}; it has: {_listed(directory)}")
        return path
    path = directory / "configs" / f"{directory.name}.yaml"
    if path.exists():
        return path
    found = sorted((directory / "configs").glob("*.yaml"))
    if len(found) == 1:
        return found[0]
    raise BadRequest(
        f"{directory}: name one of its configs (`nemo-gym:{directory.name}/<config>`): {_listed(directory)}"
    )


def _listed(directory: Path) -> str:
    return ", ".join(path.stem for path in sorted((directory / "configs").glob("*.yaml"))) or "none"


def _resources_server(document: dict[str, Any], dir_name: str, path: Path) -> tuple[str, str, dict[str, Any]]:
    """(instance name, implementation name, settings) of the config's resources server.
    Of several, the one implemented in the server's own directory; of several such (a
    benchmark's server beside a variant of it, e.g. one that grades golden patches), the
    one the config's agents drive, else the first declared."""
    found = [
        (instance, impl, block)
        for instance, value in document.items()
        if isinstance(value, dict) and isinstance(value.get("resources_servers"), dict)
        for impl, block in value["resources_servers"].items()
    ]
    if len(found) > 1:
        found = [one for one in found if one[1] == dir_name] or found
    if len(found) > 1 and all(one[1] == found[0][1] for one in found):
        driven = {instance for instance, _, _ in found if _agents(document, instance)}
        found = [one for one in found if one[0] in driven][:1] or found[:1]
    if len(found) != 1:
        names = ", ".join(instance for instance, _, _ in found) or "none"
        raise BadRequest(f"{path} must declare one resources server; it declares: {names}")
    instance, impl, block = found[0]
    return instance, impl, dict(block or {})


def _agents(
    document: dict[str, Any], instance: str, aliases: tuple[str, ...] = ()
) -> tuple[AgentConfig, ...]:
    """The agents that drive `instance`: those whose `resources_server` names it, and those
    that name none, which NeMo Gym calls self-contained (legal_agent_bench's Harbor agent
    grades its own tasks): the rows of the config they come in name them."""
    agents = []
    for name, (kind, block) in instances(document, AGENT_KIND).items():
        ref = block.get("resources_server", {"name": instance})
        if isinstance(ref, dict) and ref.get("name") == instance:
            steps = block.get("max_steps")
            agents.append(AgentConfig(name, kind, steps if isinstance(steps, int) else None, block, aliases))
    return tuple(agents)


def model_names(block: dict[str, Any], policy_aliases: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The model servers a settings block calls, by their NeMo Gym names (the policy's
    `policy_aliases` as the policy)."""
    return tuple(sorted({POLICY if name in policy_aliases else name for name in _model_refs(block)}))


def _model_refs(value: Any) -> set[str]:
    """Names of the model servers a settings block references (`{type: responses_api_models, name}`)."""
    if isinstance(value, dict):
        if value.get("type") == "responses_api_models" and isinstance(value.get("name"), str):
            return {value["name"]}
        return set().union(*(_model_refs(item) for item in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_model_refs(item) for item in value)) if value else set()
    return set()


def settings_of(server: ServerConfig, variable: str) -> dict[str, Any]:
    """The server's settings, changed by the JSON object in `$<variable>` (if set), as
    GymBus's own environments read theirs."""
    block = copy.deepcopy(server.block)
    text = os.environ.get(variable, "").strip()
    if not text:
        return block
    try:
        changes = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"${variable} is not JSON: {exc}") from None
    if not isinstance(changes, dict):
        raise BadRequest(f"${variable} must be a JSON object of {server.name}'s settings")
    return block | changes


def global_config(server: ServerConfig, block: dict[str, Any], model_ports: dict[str, int]) -> dict[str, Any]:
    """The global config the server is started with: its own instance, and each model
    server it calls, at the loopback port of the bridge's model shim for it (`policy_model`
    among them: configs also reach the policy by `${policy_base_url}`). The port of the
    server itself is set by the launcher, which binds it."""
    models = {
        name: {
            "responses_api_models": {
                "openai_model": {"host": "127.0.0.1", "port": port, "entrypoint": "app.py"}
            }
        }
        for name, port in model_ports.items()
    }
    models |= {alias: models[POLICY] for alias in server.policy_aliases}
    return _all_set(server, {
        **server.extras,
        "policy_base_url": f"http://127.0.0.1:{model_ports[POLICY]}/v1",
        "policy_api_key": "not-needed",
        "policy_model_name": "policy",
        "head_server": {"host": "127.0.0.1", "port": 0},
        **models,
        server.instance: {"resources_servers": {server.name: {**block, "host": "127.0.0.1", "port": 0}}},
    })  # fmt: skip


def agent_config(
    server: ServerConfig, agent: AgentConfig, model_ports: dict[str, int], resources_port: int
) -> dict[str, Any]:
    """The global config an agent of `server` is started with: the server's instance at
    `resources_port` (the bridge's resources shim), the models it calls at their shims,
    and its own instance; `observability_enabled`, so that 0.7.0's agent says the rollout
    in the path of every call it makes (`_rollouts`)."""
    config = global_config(server, server.block, model_ports) | {"observability_enabled": True}
    config[server.instance]["resources_servers"][server.name]["port"] = resources_port
    block = {**agent.block, "host": "127.0.0.1", "port": 0}
    config[agent.name] = {"responses_api_agents": {agent.kind: block}}
    return _all_set(server, config)


def _all_set(server: ServerConfig, config: dict[str, Any]) -> dict[str, Any]:
    """`config`, if it leaves no value `???` (NeMo Gym starts no server with one); else
    `BadRequest` naming each, and how to set it."""
    unset = unset_values(config)
    if unset:
        raise BadRequest(
            f"{server.config_file} leaves values unset (???): {', '.join(unset)}; set the server's "
            f"in ${settings_variable(server.name)}, or the others in a config of your own that includes it"
        )
    return config
