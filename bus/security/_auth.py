"""Who a process is on the bus: its NATS credentials, read from one place.

Every GymBus process (runner, workers, `status`, a trainer's rollout function) gets its
credentials from `BusAuth.from_env()`; the command line's `--nats-*` options are
shorthands for the same variables, so a process it starts inherits them.

    NATS_CREDS     a `.creds` file: a user JWT and its nkey seed (decentralized auth)
    NATS_NKEY      a file holding an nkey seed (what `gym-runner secure init` writes)
    NATS_USER      a user name, with
    NATS_PASSWORD  its password (environment only: a command line is visible in `ps`)
    NATS_TOKEN     a token (environment only)
    NATS_CA        CA certificate(s) that sign the server's certificate (turns on TLS)
    NATS_CERT      client certificate, with
    NATS_KEY       its private key (mutual TLS)

Secrets are read from files (or the environment) and never appear in a repr, a log line
or an error message: `describe()` says which kind of credential is used, not its value.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..wire import is_name

__all__ = ["ENV_VARS", "BusAuth", "inbox_prefix_for"]

ENV_VARS = (
    "NATS_CREDS",
    "NATS_NKEY",
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_TOKEN",
    "NATS_CA",
    "NATS_CERT",
    "NATS_KEY",
)
"""Every variable `BusAuth.from_env` reads (besides `NATS_URL`)."""


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


@dataclass(frozen=True)
class BusAuth:
    """A process's NATS credentials and TLS settings; all optional (an open server)."""

    creds: Path | None = None
    nkey: Path | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BusAuth:
        """The credentials the `NATS_*` variables name (see the module docstring)."""
        env = os.environ if environ is None else environ
        return cls(
            creds=_path(env.get("NATS_CREDS")),
            nkey=_path(env.get("NATS_NKEY")),
            user=env.get("NATS_USER") or None,
            password=env.get("NATS_PASSWORD") or None,
            token=env.get("NATS_TOKEN") or None,
            ca=_path(env.get("NATS_CA")),
            cert=_path(env.get("NATS_CERT")),
            key=_path(env.get("NATS_KEY")),
        )

    def as_env(self) -> dict[str, str]:
        """These credentials as `NATS_*` variables, for a child process (never its argv)."""
        values = {
            "NATS_CREDS": self.creds, "NATS_NKEY": self.nkey, "NATS_USER": self.user,
            "NATS_PASSWORD": self.password, "NATS_TOKEN": self.token, "NATS_CA": self.ca,
            "NATS_CERT": self.cert, "NATS_KEY": self.key,
        }  # fmt: skip
        return {name: str(value) for name, value in values.items() if value}

    @property
    def tls(self) -> bool:
        return bool(self.ca or self.cert)

    def describe(self) -> str:
        """Which credentials these are, without any secret: for error messages."""
        kinds = []
        if self.creds:
            kinds.append(f"creds file {self.creds}")
        if self.nkey:
            kinds.append(f"nkey seed file {self.nkey}")
        if self.user:
            kinds.append(f"user {self.user!r}" + (" with a password" if self.password else ""))
        if self.token:
            kinds.append("a token")
        if self.cert:
            kinds.append(f"client certificate {self.cert}")
        return ", ".join(kinds) or "no credentials"

    def check(self) -> None:
        """`ValueError` naming a file that is set but cannot be read (before connecting,
        so the message names the file, not a failed handshake)."""
        for name, path in (("NATS_CREDS", self.creds), ("NATS_NKEY", self.nkey), ("NATS_CA", self.ca),
                           ("NATS_CERT", self.cert), ("NATS_KEY", self.key)):  # fmt: skip
            if path is not None and not os.access(path, os.R_OK):
                raise ValueError(f"{name}: cannot read {path}")
        if bool(self.cert) != bool(self.key):
            raise ValueError("NATS_CERT and NATS_KEY go together (a client certificate and its key)")

    def ssl_context(self) -> ssl.SSLContext:
        """TLS trusting `ca` (or the system's CAs), presenting `cert`/`key` if given."""
        context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.cert and self.key:
            context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def connect_options(self, urls: list[str]) -> dict[str, Any]:
        """Keyword arguments of nats-py's `Client.connect` for these credentials."""
        options: dict[str, Any] = {"inbox_prefix": inbox_prefix_for(self)}
        if self.creds:
            options["user_credentials"] = str(self.creds)
        elif self.nkey:
            options["nkeys_seed"] = str(self.nkey)
        if self.user:
            options["user"] = self.user
            options["password"] = self.password or ""
        if self.token:
            options["token"] = self.token
        if self.tls or any(url.startswith("tls://") for url in urls):
            options["tls"] = self.ssl_context()
        return options


def _public_key(seed_file: Path, creds: bool) -> str | None:
    """The public key of the nkey seed in `seed_file` (a seed file, or a creds file)."""
    import nkeys  # only processes that use nkeys need the package loaded

    text = seed_file.read_text()
    if creds:
        marker = "BEGIN USER NKEY SEED"
        if marker not in text:
            return None
        text = text.split(marker, 1)[1].splitlines()[1]
    seed = bytearray(text.strip().encode())
    try:
        pair = nkeys.from_seed(seed)
    except nkeys.NkeysError:
        return None  # connecting will say the seed is invalid
    public = str(pair.public_key.decode())
    pair.wipe()
    return public


def inbox_prefix_for(auth: BusAuth) -> str:
    """`_INBOX.<identity>`: the reply subjects of this identity's requests. A server
    configured by `gym-runner secure` lets each identity subscribe to its own inbox
    subjects only, so no role can read another's replies. The identity is the nkey's
    public key or the user name; without either, the plain `_INBOX`."""
    try:
        if auth.creds:
            identity = _public_key(auth.creds, creds=True)
        elif auth.nkey:
            identity = _public_key(auth.nkey, creds=False)
        else:
            identity = auth.user
    except (OSError, ValueError, IndexError):
        identity = None  # connecting will say what is wrong with the file
    return f"_INBOX.{identity}" if identity and is_name(identity) else "_INBOX"
