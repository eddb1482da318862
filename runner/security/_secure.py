"""`gym-runner secure init`: a ready nats-server configuration and one credential per role.

For a named set of environments, agents and models it writes, under `--out`:

    .gitignore                  `*`: nothing here belongs in a repository, and `git add .`
                                in a working tree that holds `--out` must not commit a key
    nats.conf                   listen address, JetStream, max payload, TLS (if given) and the
                                `authorization` block: one nkey user per role, with its permissions
    helm-auth-values.yaml       the same users as values for the official NATS Helm chart
    credentials/<role>.nk       each role's nkey seed, mode 0600 (runner, producer, monitor,
                                admin, adapters, agent-<agent>, env-<env>, model-<model>,
                                nemo-gym-<server>)

The configuration holds public keys only; the seeds never leave `credentials/`. A process
uses its role's file through `NATS_NKEY=<file>` (or `--nats-nkey`). With `--operator` the
roles are users of an operator-mode server instead (`_operator`): nats.conf trusts
an operator, and each role gets `credentials/<role>.creds` (`NATS_CREDS=<file>`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gymbus.bus import Role, write_seed
from gymbus.bus.security import (
    adapters_role,
    admin_role,
    agent_role,
    environment_role,
    hosted_server_role,
    model_role,
    monitor_role,
    producer_role,
    runner_role,
    server_authorization,
)
from gymbus.functions.nemo_gym import PREFIX, ServerOutline, outline
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, GymError

from ._operator import issue, jwt_tool_missing

__all__ = ["SecureLayout", "secure_init"]


@dataclass(frozen=True)
class SecureLayout:
    """What `secure_init` wrote."""

    config: Path
    helm_values: Path | None
    """Values for the NATS Helm chart (nkey mode only)."""
    credentials: dict[str, Path]
    """Role name -> its nkey seed file (`NATS_NKEY`), or with `--operator` its creds file
    (`NATS_CREDS`)."""


def roles_for(
    environments: list[str], agents: list[str], models: list[str], nemo_gym: Sequence[str] = ()
) -> list[Role]:
    """Every role a bus serving these functions needs: the fixed ones, one per agent
    (with every agent of the named environments), environment and model, and one per hosted
    NeMo Gym server (`nemo-gym-<server>`: what `serve nemo-gym:<server>` hosts, its
    environment and its config's agents, read from its config), with the models they call.
    A hosted agent served on its own would get `agent_role(name, server, models)`."""
    hosted = [_outline(target) for target in nemo_gym]
    for env in environments:
        if env not in ENVIRONMENTS:
            raise ValueError(f"unknown environment {env!r}; known: {', '.join(sorted(ENVIRONMENTS))}")
    for agent in agents:
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}; known: {', '.join(sorted(AGENTS))}")
    # Every agent over them: those an environment declares, and installed agents of their own.
    agents = sorted({*agents, *(name for name, spec in AGENTS.items() if spec.environment in environments)})
    environments = sorted({*environments, *(AGENTS[name].environment for name in agents)})
    models = sorted(
        {*models, *(m for name in agents for m in (AGENTS[name].model, *AGENTS[name].other_models)),
         *(m for server in hosted for m in server.models)}
    )  # fmt: skip
    clash = sorted({server.name for server in hosted} & set(environments))
    if clash:
        raise ValueError(f"the NeMo Gym servers {', '.join(clash)} serve as GymBus's own environments of "
                         "the same names: a bus serves one or the other")  # fmt: skip
    return [
        runner_role(),
        producer_role(),
        monitor_role(),
        admin_role(),
        adapters_role(),
        *(agent_role(name) for name in agents),
        *(environment_role(name, models) for name in environments),
        *(model_role(name) for name in models),
        *(hosted_server_role(server.name, server.agents, server.models) for server in hosted),
    ]


def _outline(target: str) -> ServerOutline:
    try:
        return outline(target.removeprefix(PREFIX))
    except GymError as exc:
        raise ValueError(f"NeMo Gym server {target}: {exc}") from None


def secure_init(
    out: Path,
    environments: list[str],
    agents: list[str],
    models: list[str],
    *,
    listen: str = "0.0.0.0:4222",
    tls: tuple[Path, Path, Path | None] | None = None,
    operator: bool = False,
    nemo_gym: Sequence[str] = (),
) -> SecureLayout:
    """Write the configuration and credentials (see the module docstring). `tls` is the
    server's certificate, its key and, to require client certificates, their CA;
    `operator` makes the roles users of an operator-mode server (`_secure_operator`).
    Refuses to overwrite an earlier set: new keys would lock out every running process."""
    roles = roles_for(environments, agents, models, nemo_gym)
    credentials = out / "credentials"
    if (out / "nats.conf").exists() or credentials.exists() or (out / "operator").exists():
        raise FileExistsError(f"{out} already holds a configuration; choose another --out or remove it")
    if operator and (missing := jwt_tool_missing()):
        raise RuntimeError(f"--operator needs NATS's JWT library: {missing}")
    credentials.mkdir(parents=True, mode=0o700)
    os.chmod(out, 0o700)
    _ignored_by_git(out)
    config = out / "nats.conf"
    if operator:
        try:
            issued = issue(out, roles)
        except BaseException:
            shutil.rmtree(credentials)  # nothing half made stays behind to block a second try
            shutil.rmtree(out / "operator", ignore_errors=True)
            raise
        config.write_text(_server_config(out, listen, tls) + issued.config)
        return SecureLayout(config, None, issued.credentials)
    users = [(role, write_seed(credentials / f"{role.name}.nk")) for role in roles]
    config.write_text(_server_config(out, listen, tls) + server_authorization(users))
    helm = out / "helm-auth-values.yaml"
    helm.write_text(_helm_values(users))
    return SecureLayout(config, helm, {role.name: credentials / f"{role.name}.nk" for role in roles})


def _ignored_by_git(out: Path) -> None:
    """Before any key is written: git ignores `out` whole, wherever it lies (a working tree,
    its subfolder), so a key never reaches a commit by `git add .`."""
    (out / ".gitignore").write_text(
        "# Private keys: never commit them (written by gym-runner secure init).\n*\n"
    )


def _server_config(out: Path, listen: str, tls: tuple[Path, Path, Path | None] | None) -> str:
    lines = [
        "# Written by `gym-runner secure init`: GymBus's roles as users, each with its permissions.",
        f"listen: {json.dumps(listen)}",
        f"max_payload: {DEFAULT_LIMITS.max_payload}",
        # A frozen client is dropped (out of every queue group) in seconds, as by the embedded server.
        f'ping_interval: "{DEFAULT_TIMEOUTS.server_ping:g}s"',
        f"ping_max: {DEFAULT_LIMITS.server_pings_out}",
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

    entries = [{"nkey": key, "permissions": role.permissions(key)} for role, key in users]
    header = (
        "# Written by `gym-runner secure init`: the users of nats.conf for the NATS Helm chart.\n"
        "# helm upgrade --install nats nats/nats -f deploy/kubernetes/nats-values.yaml -f <this file>\n"
        + "".join(f"# {role.name}: {key}\n" for role, key in users)
    )
    return header + yaml.safe_dump(
        {"config": {"merge": {"authorization": {"users": entries}}}}, sort_keys=False
    )
