"""Policy versions: how a trainer's LoRA adapters reach every inference server through the
bus, and how each model call names the version it used.

A **policy** is what one training run trains: its key is `<name>.<run>` (`policy.r3f9a`).
Its versions count up across the run, across a trainer restarted from a checkpoint too (a
resumed trainer continues the numbering), so versions of one policy always compare. Version
`N` is served by vLLM under the adapter name `adapter_name(policy, incarnation, N)`
(`policy.r3f9a.1a2b3c4d.v7`), where the incarnation is the trainer process that made it:
names never repeat, so a server never mistakes an adapter it still holds for a new one.

Three records carry it, all JSON:

- `PolicyRecord` (KV bucket `gym_policies`, key = the policy): the versions every server
  should hold (`adapters`, each an object in the `gym_adapters` object store, chunked and
  SHA-256 checked), and `current`, the newest one the servers have loaded. The trainer's
  side writes it; model workers read `current`, adapter syncers read `adapters`.
- `AdapterServerReport` (KV bucket `gym_adapter_servers`, key = `<name>.<server>`): what
  one inference server holds, written by the `gym-runner sync-adapters` process beside it
  every `Timeouts.adapter_report` seconds, gone when that process is.
- a task row's `responses_create_params.metadata[POLICY_KEY]`: the policy whose current
  version the row's model calls must use. The model worker resolves it per call, and the
  `vllm` model function writes the version it used on the call's last output item
  (`Item.policy_version`, beside the token ids).
"""

from __future__ import annotations

import re

from msgspec import Struct

__all__ = [
    "POLICY_KEY",
    "AdapterServerReport",
    "PolicyAdapter",
    "PolicyRecord",
    "adapter_name",
    "adapter_pattern",
    "policy_key",
    "policy_name_of",
]

POLICY_KEY = "gymbus_policy"
"""The `metadata` key of a model request naming the policy whose current version it uses."""

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def _token(what: str, value: str) -> str:
    if not _TOKEN.match(value):
        raise ValueError(f"{what} {value!r} is not a valid name (letters, digits, '_' and '-' only)")
    return value


def policy_key(name: str, run: str) -> str:
    """The key of the policy `name` trained by run `run` (both subject tokens)."""
    return f"{_token('policy name', name)}.{_token('run', run)}"


def policy_name_of(policy: str) -> str:
    """The name part of a policy key (`policy` of `policy.r3f9a`)."""
    return policy.split(".", 1)[0]


def adapter_name(policy: str, incarnation: str, version: int) -> str:
    """The name vLLM serves version `version` of `policy` under (a request's `model`), made
    by trainer process `incarnation`."""
    return f"{policy}.{_token('incarnation', incarnation)}.v{version}"


def adapter_pattern(name: str) -> re.Pattern[str]:
    """Matches the adapter names of every policy called `name` (any run, any incarnation)."""
    return re.compile(rf"^{re.escape(_token('policy name', name))}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.v\d+$")


class PolicyAdapter(Struct, kw_only=True, gc=False):
    """One version of a policy's LoRA adapter, as stored on the bus."""

    version: int
    name: str
    """The name vLLM serves it under (`adapter_name`)."""
    object: str
    """Its object in the `gym_adapters` store: a tar of the adapter's directory
    (`adapter_config.json`, `adapter_model.safetensors`)."""
    digest: str
    """The object's SHA-256 (`SHA-256=<base64url>`, as the object store writes it)."""
    size: int
    """Bytes."""


class PolicyRecord(Struct, kw_only=True, gc=False):
    """What every inference server of a policy should hold, and the version in use."""

    policy: str
    incarnation: str = ""
    """The trainer process publishing it now (in its adapters' names)."""
    adapters: list[PolicyAdapter] = []
    """The versions servers should have loaded, oldest first; others are unloaded."""
    current: int = 0
    """The newest version the servers have loaded: what model calls name (0: none yet)."""
    rank: int = 0
    """The adapter's LoRA rank (servers need `--max-lora-rank` at least this)."""
    updated: float = 0.0
    """Unix time of the last change."""


class AdapterServerReport(Struct, kw_only=True, gc=False):
    """What one inference server holds of the policies named `name`, reported by the
    syncer beside it. A server that cannot be reached reports `healthy` false."""

    name: str
    server: str
    """The server's URL as its syncer reaches it (credentials redacted)."""
    healthy: bool
    loaded: list[str] = []
    """The adapter names of policy `name` the server holds."""
    failed: dict[str, str] = {}
    """Adapters it should hold but could not load: name → why."""
    max_lora_rank: int | None = None
    """The server's `--max-lora-rank` and `--max-loras` (`None`: the server does not say;
    vLLM tells them only with `VLLM_SERVER_DEV_MODE=1`)."""
    max_loras: int | None = None
    max_model_len: int | None = None
    at: float = 0.0
    """Unix time of the report."""
