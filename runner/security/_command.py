"""`gym-runner secure init`: the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._console import fail, say
from ._secure import SecureLayout, secure_init

__all__ = ["secure_init_command"]


OutDir = Annotated[
    Path, typer.Option("--out", "-o", help="Directory to write (must not hold a configuration).")
]
Environments = Annotated[list[str], typer.Option("--env", "-e", help="An environment to serve (repeatable).")]
Agents = Annotated[
    list[str], typer.Option("--agent", "-a", help="An agent to run (repeatable); its environment is added.")
]
Models = Annotated[
    list[str], typer.Option("--model", "-m", help="A model name served on the bus (repeatable), e.g. policy.")
]
NemoGymServers = Annotated[
    list[str],
    typer.Option(
        "--nemo-gym",
        help="A NeMo Gym server to host (repeatable), as `serve nemo-gym:<server>` names it; "
        "its role covers its environment and its config's agents.",
    ),
]
Listen = Annotated[str, typer.Option(help="The server's client address.")]
TlsCert = Annotated[Path | None, typer.Option(help="The server's TLS certificate.")]
TlsKey = Annotated[Path | None, typer.Option(help="Its private key.")]
TlsCa = Annotated[
    Path | None, typer.Option(help="CA of client certificates: with it, clients must present one.")
]
Operator = Annotated[
    bool,
    typer.Option(
        "--operator",
        help="Users of an operator-mode server (JWTs, a .creds file per role) instead of nkeys; "
        "needs node and the npm package the error names.",
    ),
]


def secure_init_command(
    out: OutDir,
    env: Environments = [],  # noqa: B006
    agent: Agents = [],  # noqa: B006
    model: Models = [],  # noqa: B006
    nemo_gym: NemoGymServers = [],  # noqa: B006
    listen: Listen = "0.0.0.0:4222",
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_ca: TlsCa = None,
    operator: Operator = False,
) -> None:
    """Write a nats-server configuration whose users are GymBus's roles, each allowed only
    the subjects it needs, and one credentials file (mode 0600) per role: an nkey seed, or
    with --operator a .creds file (the roles as users of an operator's account).

    Roles: runner, producer, monitor, admin, agent-<agent>, env-<env>, model-<model>,
    nemo-gym-<server>. Every agent of a named environment, and every model a named agent or
    server calls, is included.

    Example:

        gym-runner secure init --env example_single_tool_call --model policy --out bus-secrets

        nats-server -c bus-secrets/nats.conf

        NATS_URL=nats://host:4222 NATS_NKEY=bus-secrets/credentials/runner.nk gym-runner collect ...
    """
    if not (env or agent or nemo_gym):
        fail("name at least one --env, --agent or --nemo-gym")
    if bool(tls_cert) != bool(tls_key):
        fail("--tls-cert and --tls-key go together")
    tls = (tls_cert, tls_key, tls_ca) if tls_cert and tls_key else None
    try:
        layout = secure_init(
            out, env, agent, model, listen=listen, tls=tls, operator=operator, nemo_gym=nemo_gym
        )
    except (ValueError, FileExistsError, RuntimeError) as exc:
        fail(str(exc))
    _report_layout(layout, operator)


def _report_layout(layout: SecureLayout, operator: bool) -> None:
    say(f"Server configuration: {layout.config}   (nats-server -c {layout.config})")
    if layout.helm_values is not None:
        say(f"Helm chart values: {layout.helm_values}")
    variable = "NATS_CREDS" if operator else "NATS_NKEY"
    say(f"Credentials (mode 0600; give each process its own with {variable}=<file>):")
    for role, path in layout.credentials.items():
        say(f"  {role:<40} {path}")
