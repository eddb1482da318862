"""`gym-runner secure init --operator`: the same roles as users of an operator-mode
nats-server (NATS's decentralized auth: an operator signs accounts, an account signs users,
the server trusts the operator and reads accounts from its resolver).

Writes, under `--out`, beside what `secure_init` writes in nkey mode:

    operator/operator.jwt        the operator (public), which nats.conf trusts
    operator/operator.nk         its seed, and each account's (`SYS.nk`, `GYM.nk`), mode 0600:
    operator/<account>.nk        what signs more accounts or users later; keep them offline
    resolver/                    the server's account store (a full resolver), preloaded with
                                 the system account `SYS` and GymBus's account `GYM`
    credentials/<role>.creds     each role's user JWT and seed, mode 0600 (`NATS_CREDS=<file>`)

Every role is a user of `GYM`, with its role's permissions (`bus.Role.permissions`),
`allow_responses` included. The keys are made here (Python's `nkeys`); the JWTs are signed
by NATS's own JWT library, the npm package `@nats-io/jwt`, run by node from `sign_jwt/`:
NATS's command-line tool for this, `nsc`, is in none of the package registries.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymbus.bus import Role

__all__ = ["JWT_TOOL", "OperatorLayout", "issue", "jwt_tool_missing"]

JWT_TOOL = Path(__file__).resolve().parent / "sign_jwt"
"""The node script that signs the JWTs, and its pinned npm package."""
_NO_LIMIT = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
             "conn": -1, "leaf": -1}  # fmt: skip
# The JS library, unlike Go's, fills in no limit: one left out is 0, "none allowed".
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
MAX_CONTROL_LINE = 32 * 1024  # bytes of one protocol line: a CONNECT carrying a user's JWT
_SIGN_TIMEOUT = 60.0  # seconds node may take to sign everything


@dataclass(frozen=True)
class OperatorLayout:
    """What `issue` wrote: the server configuration's operator block, and one creds file per role."""

    config: str
    credentials: dict[str, Path]


def jwt_tool_missing() -> str | None:
    """Why `issue` cannot run here (node, or its npm package, is missing), or `None`."""
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm, or sh scripts/install-node.sh)"
    if not (JWT_TOOL / "node_modules" / "@nats-io" / "jwt").is_dir():
        return f"the npm package @nats-io/jwt is not installed: run `npm ci --prefix {JWT_TOOL}`"
    return None


def _new_key(prefix: int) -> tuple[str, str]:
    """A new nkey of the kind `prefix` names: (seed, public key)."""
    import nkeys

    seed = nkeys.encode_seed(os.urandom(32), prefix)
    pair = nkeys.from_seed(bytearray(seed))
    public = str(pair.public_key.decode())
    pair.wipe()
    return seed.decode(), public


def _private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def _user_permissions(role: Role, identity: str) -> dict[str, Any]:
    """A role's permissions in a user JWT's words (`pub`, `sub`, `resp` in nanoseconds)."""
    config = role.permissions(identity)
    permissions: dict[str, Any] = {"pub": config["publish"], "sub": config["subscribe"]}
    if role.answers_within:
        permissions["resp"] = {"max": -1, "ttl": int(role.answers_within * 1e9)}
    return permissions


def issue(out: Path, roles: list[Role]) -> OperatorLayout:
    """Make the operator, its accounts and one user per role under `out` (see the module
    docstring); `RuntimeError` naming what is missing when node or its package is."""
    missing = jwt_tool_missing()
    if missing:
        raise RuntimeError(f"--operator needs NATS's JWT library: {missing}")
    import nkeys

    operator_seed, operator_key = _new_key(nkeys.PREFIX_BYTE_OPERATOR)
    accounts = {name: _new_key(nkeys.PREFIX_BYTE_ACCOUNT) for name in ("SYS", "GYM")}
    users = {role.name: (role, *_new_key(nkeys.PREFIX_BYTE_USER)) for role in roles}
    plan = {
        "operator": {"name": "gymbus", "seed": operator_seed, "system_account": accounts["SYS"][1]},
        "accounts": [
            {"name": "SYS", "seed": accounts["SYS"][0], "limits": _NO_LIMIT},
            {"name": "GYM", "seed": accounts["GYM"][0], "limits": {**_NO_LIMIT, **_JETSTREAM}},
        ],
        "users": [
            {"name": name, "seed": seed, "account": "GYM", "permissions": _user_permissions(role, public)}
            for name, (role, seed, public) in users.items()
        ],
    }
    signed = _sign(plan)
    keys = out / "operator"
    keys.mkdir(mode=0o700)
    (keys / "operator.jwt").write_text(signed["operator"])
    _private(keys / "operator.nk", operator_seed + "\n")
    for name, (seed, _) in accounts.items():
        _private(keys / f"{name}.nk", seed + "\n")
    credentials = {name: out / "credentials" / f"{name}.creds" for name in users}
    for name, path in credentials.items():
        _private(path, signed["users"][name])
    return OperatorLayout(_operator_config(out, signed, accounts), credentials)


def _sign(plan: dict[str, Any]) -> dict[str, Any]:
    try:
        done = subprocess.run(
            ["node", str(JWT_TOOL / "issue.mjs")], input=json.dumps(plan), capture_output=True,
            text=True, timeout=_SIGN_TIMEOUT, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"signing the JWTs failed: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"signing the JWTs failed (node exited {done.returncode}): {done.stderr[-2000:]}")
    signed: dict[str, Any] = json.loads(done.stdout)
    return signed


def _operator_config(out: Path, signed: dict[str, Any], accounts: dict[str, tuple[str, str]]) -> str:
    """The server configuration's trust: the operator, the system account, and a full
    resolver (accounts kept on disk, updatable with `nsc push`) preloaded with both accounts,
    and a control line long enough for a user's JWT: it travels in the client's CONNECT line,
    and the runner's (about 4 KB, with training's permissions) outgrows the default 4 KB."""
    root = out.resolve()
    preload = ", ".join(f"{accounts[name][1]}: {signed['accounts'][name]}" for name in ("SYS", "GYM"))
    return (
        f"operator: {json.dumps(str(root / 'operator' / 'operator.jwt'))}\n"
        f"system_account: {accounts['SYS'][1]}\n"
        f"resolver: {{ type: full, dir: {json.dumps(str(root / 'resolver'))}, allow_delete: false }}\n"
        f"resolver_preload: {{ {preload} }}\n"
        f"max_control_line: {MAX_CONTROL_LINE}\n"
    )
