"""`gym-runner secure init`: a ready nats-server configuration and one credential per role.

For a named set of environments, agents and models it writes, under `--out`:

    nats.conf                   listen address, JetStream, max payload, TLS (if given) and the
                                `authorization` block: one nkey user per role, with its permissions
    helm-auth-values.yaml       the same users as values for the official NATS Helm chart
    credentials/<role>.nk       each role's nkey seed, mode 0600 (runner, producer, monitor,
                                adapters, agent-<agent>, env-<env>, model-<model>)

The configuration holds public keys only; the seeds never leave `credentials/`. A process
uses its role's file through `NATS_NKEY=<file>` (or `--nats-nkey`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from gymbus.bus import (
    Role,
    adapters_role,
    agent_role,
    environment_role,
    model_role,
    monitor_role,
    producer_role,
    runner_role,
    server_authorization,
    write_seed,
)
from gymbus.functions import AGENTS, ENVIRONMENTS, agents_of
from gymbus.schemas import DEFAULT_LIMITS

__all__ = ["SecureLayout", "secure_init"]


@dataclass(frozen=True)
class SecureLayout:
    """What `secure_init` wrote."""

    config: Path
    helm_values: Path
    credentials: dict[str, Path]
    """Role name -> its nkey seed file."""


def roles_for(environments: list[str], agents: list[str], models: list[str]) -> list[Role]:
    """Every role a bus serving these functions needs: the fixed ones, one per agent
    (with every agent of the named environments), environment and model."""
    for env in environments:
        if env not in ENVIRONMENTS:
            raise ValueError(f"unknown environment {env!r}; known: {', '.join(sorted(ENVIRONMENTS))}")
    for agent in agents:
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}; known: {', '.join(sorted(AGENTS))}")
    agents = sorted({*agents, *(name for env in environments for name in agents_of(ENVIRONMENTS[env]))})
    environments = sorted({*environments, *(AGENTS[name].environment for name in agents)})
    models = sorted(
        {*models, *(m for name in agents for m in (AGENTS[name].model, *AGENTS[name].other_models))}
    )
    return [
        runner_role(),
        producer_role(),
        monitor_role(),
        adapters_role(),
        *(agent_role(name) for name in agents),
        *(environment_role(name, models) for name in environments),
        *(model_role(name) for name in models),
    ]


def secure_init(
    out: Path,
    environments: list[str],
    agents: list[str],
    models: list[str],
    *,
    listen: str = "0.0.0.0:4222",
    tls: tuple[Path, Path, Path | None] | None = None,
) -> SecureLayout:
    """Write the configuration and credentials (see the module docstring). `tls` is the
    server's certificate, its key and, to require client certificates, their CA.
    Refuses to overwrite an earlier set: new keys would lock out every running process."""
    roles = roles_for(environments, agents, models)
    credentials = out / "credentials"
    if (out / "nats.conf").exists() or credentials.exists():
        raise FileExistsError(f"{out} already holds a configuration; choose another --out or remove it")
    credentials.mkdir(parents=True, mode=0o700)
    users = [(role, write_seed(credentials / f"{role.name}.nk")) for role in roles]
    config = out / "nats.conf"
    config.write_text(_server_config(out, listen, tls) + server_authorization(users))
    helm = out / "helm-auth-values.yaml"
    helm.write_text(_helm_values(users))
    os.chmod(out, 0o700)
    return SecureLayout(config, helm, {role.name: credentials / f"{role.name}.nk" for role in roles})


def _server_config(out: Path, listen: str, tls: tuple[Path, Path, Path | None] | None) -> str:
    lines = [
        "# Written by `gym-runner secure init`: nkey users with per-role permissions.",
        f"listen: {json.dumps(listen)}",
        f"max_payload: {DEFAULT_LIMITS.max_payload}",
        f"jetstream {{ store_dir: {json.dumps(str(out.resolve() / 'jetstream'))} }}",
    ]
    if tls is not None:
        cert, key, ca = tls
        verify = f", ca_file: {json.dumps(str(ca))}, verify: true" if ca else ""
        lines.append(
            f"tls {{ cert_file: {json.dumps(str(cert))}, key_file: {json.dumps(str(key))}{verify} }}"
        )
    return "\n".join(lines) + "\n"


def _helm_values(users: list[tuple[Role, str]]) -> str:
    """Values for the official NATS chart (`config.merge`) with these users."""
    import yaml  # only this command needs it; worker processes do not load it

    entries = [
        {
            "nkey": key,
            "permissions": {
                "publish": {"allow": list(role.publish)},
                "subscribe": {"allow": [f"_INBOX.{key}.>", *role.subscribe]},
            },
        }
        for role, key in users
    ]
    header = (
        "# Written by `gym-runner secure init`: the users of nats.conf for the NATS Helm chart.\n"
        "# helm upgrade --install nats nats/nats -f deploy/kubernetes/nats-values.yaml -f <this file>\n"
        + "".join(f"# {role.name}: {key}\n" for role, key in users)
    )
    return header + yaml.safe_dump(
        {"config": {"merge": {"authorization": {"users": entries}}}}, sort_keys=False
    )
