"""A NeMo Gym config file resolved as NeMo Gym 0.7.0's own loader resolves it
(`nemo_gym.global_config.GlobalConfigDictParser.parse`), on plain data: the document the
bridge reads a server, its agents and their settings from.

The rules, in the loader's order:

1. **`config_paths`**: the files a config names (relative to NeMo Gym's root) are read
   breadth first, each once (the first mention wins), and merged so that a file overrides
   everything it pulled in, and a later sibling (with its own includes) an earlier one.
   Mappings merge key by key, anything else replaces, and `???` (unset) never replaces a value.
2. **`_inherit_from`, `_copy`, `_delete_key`** (and `${inherit_from:a.b}`, `${copy:a.b}`):
   a block becomes the block at that path with its own keys merged over it. Inheriting
   moves (the source is removed: `opencode_sandboxed_agent` becomes the SWE servers'
   `swe_rebench_opencode_sandboxed_agent`), copying does not. An environment server naming
   an agent that moved follows it.
3. **An unbound agent** (its `resources_server.name` is `???`) is composed onto every
   other agent that has a resources server, and dropped.
4. **The policy model**: the config is resolved with NeMo Gym's placeholder policy
   (`NO_MODEL`, what its loader uses when no model is given), so a block copying
   `policy_model` resolves; a model instance whose block then equals the policy's is the policy.
5. **References** to resources servers, agents and environment servers must name an
   instance of that kind; `skip_verification(_reward)` set at the top reaches every agent
   that does not set its own.

What the loader does that the bridge deliberately does not (each with its reason, in
tests/functions/test_nemo_gym_config.py): ports and hosts (the bridge binds its own), ng_run's
own settings (head server, install, ports), environment servers it generates for agents
(GymBus's runner reaches agents on the bus), model references (the bus serves models),
interpolations (left to the server process, which resolves them as it reads its config,
as under ng_run), and validating blocks against its config classes (the server does as it starts).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from gymbus.schemas import BadRequest

__all__ = [
    "AGENT_KIND",
    "KINDS",
    "MISSING",
    "MODEL_KIND",
    "NO_MODEL",
    "RESERVED",
    "instances",
    "merge",
    "resolve",
    "unset_values",
]

MISSING = "???"
"""OmegaConf's value for "unset": a config must not start with one left."""
AGENT_KIND = "responses_api_agents"
MODEL_KIND = "responses_api_models"
RESOURCES_KIND = "resources_servers"
ENVIRONMENT_KIND = "environment_servers"
KINDS = (MODEL_KIND, RESOURCES_KIND, AGENT_KIND, ENVIRONMENT_KIND)
NO_MODEL: dict[str, Any] = {
    "policy_base_url": "",
    "policy_api_key": "",
    "policy_model_name": "",
    "policy_model": {MODEL_KIND: {"dummy_model": {"entrypoint": "app.py"}}},
}
"""NeMo Gym's `GlobalConfigDictParserConfig.NO_MODEL_GLOBAL_CONFIG_DICT`, merged over the files."""
RESERVED = frozenset(
    """config_paths entrypoint default_host head_server disallowed_ports head_server_deps python_version
    pip_install_verbose use_absolute_ip uv_pip_set_python skip_venv_if_present hf_token
    ray_head_node_address port_range_low port_range_high dry_run server_spinup_timeout_seconds
    model_endpoint_readiness_timeout_seconds allow_openai_version_skew uv_cache_dir
    uv_lock_timeout_seconds uv_venv_dir results_dir cache_dir _inherit_from _copy nemo_gym_log_dir
    verbose json query observability_enabled model_call_capture_dir token_id_capture component_name
    skip_verification skip_verification_reward telemetry allow_unsupported_pairing
    environment_server_name environment_server_routes environment_routing_mode""".split()
)
"""Top-level keys that are never a server instance (`NEMO_GYM_RESERVED_TOP_LEVEL_KEYS`)."""
_INHERIT, _COPY, _DELETE = "_inherit_from", "_copy", "_delete_key"
_CARRIED_OVER = ("resources_server", "model_server", "datasets")
_LEGACY_PATHS = {
    "responses_api_agents/stirrup_agent/configs/stirrup_gdpval.yaml": "responses_api_agents/stirrup_agent/configs/stirrup_agent.yaml",
    "responses_api_agents/tau2/configs/tau2_agent.yaml": "responses_api_agents/tau2/configs/tau2.yaml",
    "responses_api_agents/verifiers_agent/configs/acereason-math.yaml": "responses_api_agents/verifiers_agent/configs/verifiers_agent.yaml",
}  # fmt: skip
"""Config paths 0.7.0 renamed, read under their new name where the old one is gone."""


def resolve(path: Path, root: Path) -> dict[str, Any]:
    """The config at `path` resolved as NeMo Gym resolves it (the module's rules), its
    `config_paths` relative to NeMo Gym's `root`. `BadRequest` for a config NeMo Gym refuses
    to resolve (a missing file, an inherited path that does not exist, a dangling reference)."""
    document: dict[str, Any] = {}
    for one in _files_in_merge_order(path, root):
        document = merge(document, one)
    document = merge(document, NO_MODEL)
    document.pop("config_paths", None)
    _swap_keys(document, path)
    _compose_unbound_agent(document, path)
    _merge_placeholder_models(document)
    _check_references(document, path)
    _skip_verification(document)
    return document


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base` as `OmegaConf.merge`: mappings key by key, anything else replaced,
    and `???` replaces nothing (it only fills a key that has no value)."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            merged[key] = merge(below, value)
        elif value != MISSING or key not in merged:
            merged[key] = copy.deepcopy(value)
    return merged


def instances(document: dict[str, Any], kind: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The document's server instances of `kind`: name -> (implementation, settings)."""
    found = {}
    for name, value in document.items():
        if name in RESERVED or not isinstance(value, dict) or not isinstance(value.get(kind), dict):
            continue
        if len(value[kind]) == 1 and isinstance(block := next(iter(value[kind].values())), dict):
            found[name] = (next(iter(value[kind])), block)
    return found


def unset_values(document: Any, prefix: str = "") -> list[str]:
    """The dotted paths of the values still `???` (NeMo Gym refuses to start with any)."""
    if isinstance(document, dict):
        items = [(f"{prefix}.{key}" if prefix else str(key), value) for key, value in document.items()]
    elif isinstance(document, list):
        items = [(f"{prefix}[{index}]", value) for index, value in enumerate(document)]
    else:
        return []
    return [
        found
        for path, value in items
        for found in ([path] if value == MISSING else unset_values(value, path))
    ]


def _files_in_merge_order(path: Path, root: Path) -> list[dict[str, Any]]:
    """The config and every file it pulls in, each read once, breadth first, ordered so
    that a file follows everything it pulled in and siblings keep their listed order."""
    files, documents = [path.resolve()], [_load(path)]
    children: list[list[int]] = [[]]
    index = 0
    while index < len(files):
        for entry in documents[index].get("config_paths") or []:
            found = _located(str(entry), root, files[index])
            if found not in files:
                files.append(found)
                documents.append(_load(found))
                children.append([])
                children[index].append(len(files) - 1)
        index += 1
    order: list[int] = []
    pending = [(0, False)]
    while pending:  # post-order: a file after the files it pulled in
        at, visited = pending.pop()
        if visited:
            order.append(at)
            continue
        pending.append((at, True))
        pending.extend((child, False) for child in reversed(children[at]))
    return [documents[at] for at in order]


def _located(entry: str, root: Path, includer: Path) -> Path:
    found = root / entry
    if not found.exists() and entry in _LEGACY_PATHS and (root / _LEGACY_PATHS[entry]).exists():
        found = root / _LEGACY_PATHS[entry]
    if not found.exists():
        raise BadRequest(f"NeMo Gym config {includer} names {entry} in config_paths; there is no {found}")
    return found.resolve()


def _load(path: Path) -> dict[str, Any]:
    """A YAML file read as OmegaConf reads it (`1e-5` is a float, a date a string, a
    duplicate key an error)."""
    import yaml  # only a worker hosting a NeMo Gym server reads YAML

    try:
        document = yaml.load(path.read_text(), Loader=_omegaconf_loader())
    except (OSError, yaml.YAMLError) as exc:
        raise BadRequest(f"cannot read NeMo Gym config {path}: {exc}") from None
    if document is not None and not isinstance(document, dict):
        raise BadRequest(f"NeMo Gym config {path} is not a mapping")
    return document or {}


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
"""OmegaConf's float resolver (`omegaconf._utils.get_yaml_loader`), added to YAML's."""


@functools.cache
def _omegaconf_loader() -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    if key_node.value in keys:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"found duplicate key {key_node.value}", key_node.start_mark,
                        )  # fmt: skip
                    keys.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in Loader.yaml_implicit_resolvers.items()
    }
    return Loader


def _swap_keys(document: dict[str, Any], path: Path) -> None:
    """Apply every `_inherit_from`, `_copy` and `_delete_key`, then point environment
    servers at the agents that moved (`_recursively_swap_keys`)."""
    frozen = copy.deepcopy(document)
    agents = set(instances(frozen, AGENT_KIND))
    destinations: dict[str, list[str]] = defaultdict(list)
    for name, value in frozen.items():
        source = _inherit_source(value)
        if isinstance(source, str) and source in agents:
            destinations[source].append(name)
    _swap_in(document, document, frozen, path)
    final = set(instances(document, AGENT_KIND))
    moved = {
        source: [target for target in targets if target in final]
        for source, targets in destinations.items()
        if source not in document
    }
    for source, targets in moved.items():
        if len(targets) > 1 and source in _environment_agent_refs(document):
            raise BadRequest(
                f"{path}: agent {source!r} is inherited into several names ({', '.join(targets)}) "
                "and an environment server still names it"
            )
    _retarget_environment_servers(document, {s: t[0] for s, t in moved.items() if len(t) == 1})


def _inherit_source(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("${inherit_from:"):
        return value.removeprefix("${inherit_from:").removesuffix("}")
    return value.get(_INHERIT) if isinstance(value, dict) and value.get(_INHERIT) != MISSING else None


def _swap_in(mapping: dict[str, Any], document: dict[str, Any], frozen: dict[str, Any], path: Path) -> None:
    for key, value in list(mapping.items()):
        still_to_delete = _delete_keys(value)
        if isinstance(value, dict):
            _swap_in(value, document, frozen, path)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _swap_in(item, document, frozen, path)
        directive = _directive(value)
        if directive is None:
            continue
        where, moves = directive
        parent = _at(document, where[:-1], path)
        if moves and isinstance(parent, dict):
            parent.pop(where[-1], None)  # inheriting moves; several may inherit one path
        source = _at(frozen, where, path)
        if parent is _UNSET or source is _UNSET:
            mapping[key] = MISSING  # reported as unset, as NeMo Gym reports it
            continue
        source = copy.deepcopy(source)
        mapping[key] = (
            merge(source, value) if isinstance(value, dict) and isinstance(source, dict) else source
        )
        for name in still_to_delete:
            if name not in mapping[key]:
                raise BadRequest(f"{path}: _delete_key names {name!r}, which {key!r} does not have")
            mapping[key].pop(name)


def _delete_keys(value: Any) -> set[str]:
    """Remove the keys `value`'s `_delete_key` names that it has; those it does not have yet
    (they come with what it inherits)."""
    if not isinstance(value, dict) or _DELETE not in value:
        return set()
    names = {name.strip() for name in str(value.pop(_DELETE)).split(",")}
    present = names & set(value)
    for name in present:
        value.pop(name)
    return names - present


def _directive(value: Any) -> tuple[list[str], bool] | None:
    """(the dotted path, whether it moves) of an inherit or copy directive in `value`."""
    source: Any = None
    moves = False
    if isinstance(value, str):
        for prefix, is_move in (("${inherit_from:", True), ("${copy:", False)):
            if value.startswith(prefix):
                source, moves = value.removeprefix(prefix).removesuffix("}"), moves or is_move
    elif isinstance(value, dict):
        if _INHERIT in value:
            source, moves = value.pop(_INHERIT), True
        if _COPY in value:
            source = value.pop(_COPY)
    return None if source is None else (str(source).split("."), moves)


_UNSET = object()


def _at(document: Any, where: list[str], path: Path) -> Any:
    """The value at `where`, or `_UNSET` if it or a mapping on the way is `???`."""
    for key in where:
        if not isinstance(document, dict) or key not in document:
            raise BadRequest(f"{path}: the path {'.'.join(where)} it inherits or copies does not exist")
        if document[key] == MISSING:
            return _UNSET
        document = document[key]
    return document


def _environment_agent_refs(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The agent references of every environment server, by the agent they name."""
    refs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for value in document.values():
        servers = value.get(ENVIRONMENT_KIND) if isinstance(value, dict) else None
        for server in (servers or {}).values() if isinstance(servers, dict) else ():
            for field, ref in (server or {}).items() if isinstance(server, dict) else ():
                if isinstance(ref, dict) and (
                    ref.get("type") == AGENT_KIND or (field == "agent_server" and ref.get("type") is None)
                ):
                    refs[str(ref.get("name"))].append(ref)
    return refs


def _retarget_environment_servers(document: dict[str, Any], renames: dict[str, str]) -> None:
    for name, refs in _environment_agent_refs(document).items():
        for ref in refs if name in renames else ():
            ref["name"] = renames[name]


def _compose_unbound_agent(document: dict[str, Any], path: Path) -> None:
    """Rehost every agent that has a resources server on the one agent whose resources
    server is left unset, which is dropped (`compose_unbound_agent`)."""
    agents = instances(document, AGENT_KIND)
    unbound = [name for name, (_, block) in agents.items() if _bound_to(block) == MISSING]
    if not unbound:
        return
    if len(unbound) > 1:
        raise BadRequest(f"{path}: several agents leave their resources_server unset: {', '.join(unbound)}")
    source = unbound[0]
    kind, block = agents[source]
    targets = [name for name, (_, one) in agents.items() if name != source and _bound_to(one) is not None]
    if not targets:
        raise BadRequest(f"{path}: agent {source!r} leaves its resources_server unset and no agent uses one")
    _check_pairing(document, kind, {target: agents[target][1] for target in targets}, path)
    renames = {target: _composed_name(target, agents[target][0], kind) for target in targets}
    taken = set(document) - set(renames) - {source}
    clashes = sorted(new for new in renames.values() if new in taken or list(renames.values()).count(new) > 1)
    if clashes:
        raise BadRequest(f"{path}: composing agent {source!r} would give two instances the names {clashes}")
    document.pop(source)
    for target in targets:
        composed = copy.deepcopy(block)
        bindings = agents[target][1]
        composed.update({key: copy.deepcopy(bindings[key]) for key in _CARRIED_OVER if key in bindings})
        instance = document.pop(target)
        instance[AGENT_KIND] = {kind: composed}
        document[renames[target]] = instance
    _retarget_environment_servers(document, renames)
    document["agent_map"] = {**renames, **(document.get("agent_map") or {})}


def _check_pairing(
    document: dict[str, Any], kind: str, targets: dict[str, dict[str, Any]], path: Path
) -> None:
    """A resources server that lists its `allowed_agents` is not driven by another kind,
    unless `allow_unsupported_pairing` (or `$NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING`) says so."""
    waived = os.environ.get("NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING", "").lower() not in ("", "0", "false")
    if document.get("allow_unsupported_pairing") or waived:
        return
    servers = instances(document, RESOURCES_KIND)
    for target, block in targets.items():
        allowed = servers.get(str(_bound_to(block)), ("", {}))[1].get("allowed_agents")
        allowed = [allowed] if isinstance(allowed, str) else allowed
        if allowed and kind not in allowed:
            raise BadRequest(f"{path}: {target}'s resources server accepts {', '.join(allowed)}, not {kind}")


def _bound_to(block: dict[str, Any]) -> Any:
    """The name of the resources server an agent's block names (`???` if unset, "" if it
    names none); None if it has no `resources_server` (a self-contained agent)."""
    ref = block.get("resources_server")
    return ref.get("name", "") if isinstance(ref, dict) else None


def _composed_name(name: str, kind: str, new_kind: str) -> str:
    stem = name.removesuffix(f"_{kind}").removesuffix(kind).rstrip("_")
    if stem == name:
        stem = name.removesuffix("_agent").rstrip("_")
    return f"{stem}_{new_kind}" if stem else new_kind


def _merge_placeholder_models(document: dict[str, Any]) -> None:
    """A model instance given both the placeholder `dummy_model` and a real kind keeps the
    real kind, the placeholder's settings under it (as NeMo Gym merges them)."""
    for value in document.values():
        models = value.get(MODEL_KIND) if isinstance(value, dict) else None
        if not isinstance(models, dict) or "dummy_model" not in models:
            continue
        if len(value) > 1 or len(models) > 1:
            placeholder = models.pop("dummy_model")
            kind = next(iter(models))
            models[kind] = merge(placeholder, models[kind])


def _check_references(document: dict[str, Any], path: Path) -> None:
    """Every reference to a resources server, agent or environment server names one."""
    named = {kind: set(instances(document, kind)) for kind in KINDS}
    for kind in KINDS:
        for name, (_, block) in instances(document, kind).items():
            for field, ref in block.items():
                if not (
                    isinstance(ref, dict) and ref.get("type") in KINDS and isinstance(ref.get("name"), str)
                ):
                    continue
                if ref["type"] != MODEL_KIND and ref["name"] not in named[ref["type"]]:
                    raise BadRequest(
                        f"{path}: {name}'s {field} names {ref['type']}/{ref['name']!r}, which the config "
                        f"does not define (it defines: {', '.join(sorted(named[ref['type']])) or 'none'})"
                    )


def _skip_verification(document: dict[str, Any]) -> None:
    for key in ("skip_verification", "skip_verification_reward"):
        if document.get(key) is not None:
            for _, block in instances(document, AGENT_KIND).values():
                block.setdefault(key, document[key])
