"""`gym-runner check ENV`: does an environment on the bus keep the protocol? For its author,
as Gymnasium's `env_checker` is for a Gymnasium environment.

Each item is OK or FAILED, with the reason:

    service      `$SRV.PING.<env>` answers: the environment is registered with the NATS
                 Services API (so `gym-runner status` lists it)
    subjects     its `$SRV.INFO` lists the seed, the verify and every declared tool's subject
    seed         `gym.env.<env>.seed` with the sample row answers a JSON object
    tool <name>  each declared tool, called with arguments built from its JSON Schema in the
                 seeded session, answers JSON, or a well-formed error the model could read
                 (a 4xx: the arguments were refused); a crash (500), an upstream failure (502),
                 no reply or nobody serving it fails
    verify       the sample row with a sample response gets a reply whose `reward` is a number
    offered      every tool the sample row offers the model is one the environment declares
    schema <name>  the arguments the sample row offers the model for a declared tool are the
                 tool's own: no field it does not take, every field it requires, and types
                 it accepts (a model that follows a wrong schema only gets refusals)

Every call of one check shares a session id, as a rollout's calls do.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from gymbus.bus import Bus, subjects
from gymbus.schemas import (
    DEADLINE,
    DEFAULT_TIMEOUTS,
    RESPONSE,
    SESSION,
    GymError,
    NoResponders,
    RemoteError,
    RequestTimeout,
    Timeouts,
)

from ._contract import EnvironmentContract, sample_response

__all__ = ["CheckItem", "check_environment"]

_encode = msgspec.json.Encoder().encode
_SHOWN = 120  # characters of a reply quoted in a report


@dataclass(frozen=True)
class CheckItem:
    """One thing checked: `what` (e.g. `tool get_weather`), whether it is `ok`, and why."""

    what: str
    ok: bool
    detail: str

    def describe(self) -> str:
        return f"{'OK    ' if self.ok else 'FAILED'}  {self.what}: {self.detail}"


async def check_environment(
    bus: Bus,
    contract: EnvironmentContract,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    monitor: Bus | None = None,
) -> list[CheckItem]:
    """Check the environment `contract` names, on `bus` (see the module docstring).
    `monitor`, if given, is the connection that reads `$SRV.INFO` (a right of the monitor
    role on a locked bus); default `bus`."""
    env = contract.name
    headers = {SESSION: f"check-{uuid.uuid4().hex}", DEADLINE: f"{time.time() + timeouts.check:.3f}"}

    async def call(what: str, subject: str, body: Any, judge: Judge, refusal_ok: bool = False) -> CheckItem:
        send = bus.request(subject, _encode(body), timeout=timeouts.check, headers=headers)
        return await _called(what, subject, send, judge, refusal_ok=refusal_ok)

    items, listed = await _service(monitor or bus, contract, timeouts)
    items.append(await call("seed", subjects.env_seed(env), contract.row, _json_object))
    for tool in sorted({*contract.tools, *contract.offered, *listed}):
        arguments = contract.arguments(tool)
        items.append(
            await call(f"tool {tool}", subjects.env_tool(env, tool), arguments, _json, refusal_ok=True)
        )
    items += _schema_items(contract)
    verify_row = {**contract.row, RESPONSE: sample_response(time.time())}
    items.append(await call("verify", subjects.env_verify(env), verify_row, _reward))
    undeclared = [tool for tool in contract.offered if tool not in contract.tools]
    if undeclared:
        offered = f"the sample row offers the model {', '.join(undeclared)}, which {env} does not declare"
        items.append(CheckItem("offered", False, offered))
    return items


def _schema_items(contract: EnvironmentContract) -> list[CheckItem]:
    """A `schema <tool>` item for each tool the sample row offers with a schema to compare."""
    items = []
    for tool in contract.offered:
        found = contract.mismatches(tool)
        if found is not None:
            detail = "; ".join(found) or "the row offers the model the fields and types the tool takes"
            items.append(CheckItem(f"schema {tool}", not found, detail))
    return items


async def _service(
    bus: Bus, contract: EnvironmentContract, timeouts: Timeouts
) -> tuple[list[CheckItem], set[str]]:
    """The service and subjects items, and the tools the service lists."""
    env, ping = contract.name, subjects.service_ping(contract.name)
    try:
        await bus.request(ping, b"", timeout=timeouts.ping * 4)
    except GymError as exc:
        reason = "no reply" if isinstance(exc, NoResponders | RequestTimeout) else str(exc)
        detail = (
            f"{ping}: {reason}: no worker registered {env!r} with the NATS Services API (is one serving it?)"
        )
        return [CheckItem("service", False, detail)], set()
    infos = await bus.service_infos(env, window=timeouts.discovery)
    items = [CheckItem("service", True, f"{ping} answers ({len(infos) or 'some'} instance(s))")]
    if not infos:
        unlisted = "not listed: this connection may not read $SRV.INFO (a monitor's right on a locked bus)"
        return [*items, CheckItem("subjects", True, f"{unlisted}; each is called below")], set()
    listed = {endpoint.subject for info in infos for endpoint in info.endpoints or []}
    wanted = [
        subjects.env_seed(env),
        subjects.env_verify(env),
        *(subjects.env_tool(env, t) for t in contract.tools),
    ]
    missing = [subject for subject in wanted if subject not in listed]
    tools = {
        subject.split(".tool.", 1)[1] for subject in listed if subject.startswith(f"gym.env.{env}.tool.")
    }
    extra = sorted(tools - set(contract.tools))
    more = (
        f"; it also serves tools it does not declare: {', '.join(extra)}" if extra and contract.tools else ""
    )
    if missing:
        items.append(CheckItem("subjects", False, f"not served: {', '.join(missing)}{more}"))
    else:
        items.append(
            CheckItem(
                "subjects", True, f"seed, verify and {len(contract.tools)} declared tool(s) listed{more}"
            )
        )
    return items, tools


Judge = Callable[[bytes], "str | None"]
"""What is malformed in a reply, or `None`."""


async def _called(
    what: str, subject: str, sent: Awaitable[bytes], judge: Judge, *, refusal_ok: bool = False
) -> CheckItem:
    """One request, and the verdict on its reply: `judge(reply)` says what is malformed, if anything."""
    try:
        reply = await sent
    except NoResponders:
        return CheckItem(what, False, f"nobody serves {subject}")
    except RequestTimeout as exc:
        return CheckItem(what, False, f"no reply from {subject} ({exc.message})")
    except RemoteError as exc:
        wrong = f"{subject} answered error {exc.code} {exc.type}: {exc.message}"
        if refusal_ok and exc.code.startswith("4"):
            return CheckItem(what, True, f"{wrong} (a well-formed error the model reads)")
        return CheckItem(what, False, wrong)
    except GymError as exc:
        return CheckItem(what, False, f"{subject}: {exc}")
    problem = judge(reply)
    shown = reply[:_SHOWN].decode(errors="replace") + ("…" if len(reply) > _SHOWN else "")
    return CheckItem(what, problem is None, problem or f"replied {shown}")


def _json(reply: bytes) -> str | None:
    try:
        msgspec.json.decode(reply)
    except (msgspec.DecodeError, RecursionError):
        return f"the reply is not JSON: {reply[:_SHOWN]!r}"
    return None


def _json_object(reply: bytes) -> str | None:
    problem = _json(reply)
    if problem is None and not isinstance(msgspec.json.decode(reply), dict):
        return f"the reply is not a JSON object: {reply[:_SHOWN]!r}"
    return problem


def _reward(reply: bytes) -> str | None:
    problem = _json_object(reply)
    if problem is not None:
        return f"malformed result: {problem}"
    reward = msgspec.json.decode(reply).get("reward")
    if reward is None:
        return f"malformed result: no `reward` in {reply[:_SHOWN]!r}"
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        return f"malformed result: `reward` must be a finite number, got {reward!r}"
    return None
