"""The front as NeMo Gym starts a server: from a trainer's `config_paths`.

NeMo RL and veRL's recipe start NeMo Gym themselves (`RunHelper().start(...)` with their
`config_paths` and their vLLM servers as `policy_base_url`) and cannot be pointed at a
head server already running. So GymBus ships NeMo Gym servers named `gymbus`
(`nemo_gym_root/`, found through `NEMO_GYM_EXTRA_ROOTS`) and a config that a user adds to
those `config_paths`: NeMo Gym starts a process per server (their `app.py`), gives each its
host and port, and serves the config from its own head server. The one that says what to
`serve` hands over to `gym-runner front --from-nemo-gym`, which then:

1. reads the resolved config NeMo Gym passes every server (`NEMO_GYM_CONFIG_DICT`, its own
   name in `NEMO_GYM_CONFIG_PATH`);
2. connects to its entry's `nats_url` (or `NATS_URL`), or starts an embedded nats-server,
   and starts, supervised (`runner._workers`), the worker processes its entry's `serve`
   names (GymBus's functions, and NeMo Gym servers hosted with their own agents,
   `nemo-gym:<server>`), as many as its `workers` says, with the policy served as `policy`
   by the `vllm` model function on the trainer's `policy_base_url` servers (token capture
   on), or by the offline policy when there are none; a group of workers that keeps
   exiting as it starts is given up on, said in the log, and its agents answered 503;
3. serves, at the ports NeMo Gym gave them, the config's servers whose implementation is
   `gymbus` (agents and environments; each agent's environment server is NeMo Gym's own
   `legacy_agent` relay to the agent's `/run`), and its own port last, with the rollout
   deadline its entry's `rollout_timeout` gives (`FrontEntry`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import yaml
from aiohttp import web

from gymbus.bus import Bus, BusAuth, ServeOptions, open_bus
from gymbus.bus.front import FrontBus, LocalWorkers
from gymbus.functions import ModelOptions
from gymbus.functions.nemo_gym import PREFIX, is_nemo_gym, outline
from gymbus.functions.registry import policy_adapter
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, BusUnavailable, Timeouts

from .._workers import Supervised, WorkerProcesses, start_limit
from ._http import app_for
from ._layout import Layout, _instances

__all__ = ["CONFIG_DICT", "CONFIG_PATH", "NEMO_GYM_ROOT", "policy_of", "run_started_front"]

log = logging.getLogger("gymbus.front")

NEMO_GYM_ROOT = Path(__file__).resolve().parent / "nemo_gym_root"
"""GymBus's servers laid out as NeMo Gym lays out its own, for `NEMO_GYM_EXTRA_ROOTS`."""
CONFIG_DICT = "NEMO_GYM_CONFIG_DICT"
CONFIG_PATH = "NEMO_GYM_CONFIG_PATH"


def policy_of(config: dict[str, Any]) -> ModelOptions | None:
    """The trainer's policy servers (`policy_base_url`: one URL or a list, one per replica)
    for the `vllm` model function; `None` (the offline policy) if the config has none."""
    urls = config.get("policy_base_url")
    if not urls:
        return None
    joined = ",".join(urls) if isinstance(urls, list) else str(urls)
    return ModelOptions(
        base_url=joined,
        model=config.get("policy_model_name"),
        api_key=config.get("policy_api_key"),
        api="vllm",
    )


def _own_entry(config: dict[str, Any], own: str) -> dict[str, Any]:
    for name, _, _, instance in _instances(config):
        if name == own:
            return instance
    raise ValueError(f"{CONFIG_PATH} names {own!r}, which the config does not declare")


ROLLOUT_TIMEOUT = 900.0
"""The front's default rollout deadline: a trainer's step waits for its slowest rollout, so
a lost one must cost minutes, not the hour a `collect` rollout may take."""
POLICY = "policy"


class FrontEntry(msgspec.Struct, kw_only=True):
    """What the front's entry in the config says, besides NeMo Gym's own keys (`entrypoint`,
    `host`, `port`, ...), which it leaves to NeMo Gym."""

    serve: list[str] = []
    """The functions to serve: GymBus's by name, a file or module, or `nemo-gym:<server>`."""
    workers: int | dict[str, int] = 1
    """Worker processes serving all of `serve` and the policy, or a number per function
    (`policy` for the policy; 1 for a function not named; 0: served from elsewhere on the
    same bus). Each process that dies is replaced."""
    nats_url: str | None = None
    """The bus to join (default `NATS_URL`, else an embedded nats-server of the front's own);
    credentials from the `NATS_*` variables (`gym-runner secure init`)."""
    rollout_timeout: float = ROLLOUT_TIMEOUT
    """Seconds one `/run`'s rollout may take, from its request, before it is answered 502."""
    log_dir: str | None = None
    """Where the workers' log goes (default: the system's temporary folder)."""


def front_entry(config: dict[str, Any], own: str) -> FrontEntry:
    """The front's entry `own` of `config`; `ValueError` naming the field that is wrong."""
    try:
        return msgspec.convert(_own_entry(config, own), FrontEntry, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{CONFIG_PATH} {own}: {exc}") from None


async def run_started_front(stop: asyncio.Event) -> None:
    """Serve as NeMo Gym's server `$NEMO_GYM_CONFIG_PATH` until `stop` is set."""
    config = yaml.safe_load(os.environ[CONFIG_DICT])
    own = os.environ[CONFIG_PATH]
    entry = front_entry(config, own)
    timeouts = replace(DEFAULT_TIMEOUTS, rollout=entry.rollout_timeout)
    async with open_bus(entry.nats_url, name="gym-runner front (NeMo Gym)", timeouts=timeouts) as bus:
        log_file = Path(entry.log_dir or tempfile.gettempdir()) / f"gymbus-front-{os.getpid()}.log"
        groups = await _worker_groups(entry, policy_of(config), bus, log_file)
        supervised = Supervised([group for group, _ in groups])
        try:
            if await _unless_stopped(_wait_started(bus, groups, timeouts), stop):
                await _serve(bus, config, own, stop, timeouts, _FrontWorkers(groups))
        finally:
            await supervised.stop(timeouts.drain)


async def _unless_stopped(step: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run `step` unless `stop` is set first (a SIGTERM while workers start): whether it ran."""
    running = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
    for task in (running, stopping):
        task.cancel()
    await asyncio.gather(running, stopping, return_exceptions=True)
    return not stop.is_set()


async def _worker_groups(
    entry: FrontEntry, model: ModelOptions | None, bus: Bus, log_file: Path
) -> list[tuple[WorkerProcesses, list[str]]]:
    """The groups of worker processes `entry` asks for, started, each with the services it
    serves: one group for everything, or one per function (`FrontEntry.workers`)."""
    options = ServeOptions(functions=(), model=model or ModelOptions(), limits=DEFAULT_LIMITS)
    functions = {name: await _served_as(name) for name in entry.serve}
    functions[policy_adapter(model)] = [POLICY]
    plan: list[tuple[tuple[str, ...], list[str], int]]
    if isinstance(entry.workers, dict):
        counts = entry.workers
        plan = [((name,), services, counts.get(POLICY if services == [POLICY] else name, 1))
                for name, services in functions.items()]  # fmt: skip
    else:
        plan = [(tuple(functions), sum(functions.values(), []), entry.workers)]
    # Credentials for workers on a shared bus: the front's own (`NATS_*`).
    auth = bus.worker_auth() if bus.embedded is not None else BusAuth.from_env()
    groups = []
    for names, services, count in plan:
        if count > 0:
            serve = replace(options, functions=names)
            groups.append((WorkerProcesses(serve, bus.url, log_file, count, auth), services))
    for group, _ in groups:
        group.start()
        log.info("started %d worker process(es) serving %s (log: %s)", group.count, group.name, log_file)
    return groups


async def _wait_started(
    bus: Bus, groups: list[tuple[WorkerProcesses, list[str]]], timeouts: Timeouts
) -> None:
    """Until every group serves its services, or was given up on: then the front serves
    anyway, and a `/run` for what it served answers 503 with the reason."""
    for group, services in groups:
        try:
            await bus.wait_served(services, start_limit(group, timeouts), check=group.check)
        except BusUnavailable as exc:
            log.error("%s cannot be served: %s", ", ".join(services), exc)


class _FrontWorkers:
    """The front's own worker groups, as the front's `/run`s ask about them (`LocalWorkers`)."""

    def __init__(self, groups: list[tuple[WorkerProcesses, list[str]]]) -> None:
        self.groups = groups

    def given_up(self, agent: str) -> str | None:
        return next(
            (group.failed for group, services in self.groups if agent in services and group.failed), None
        )

    def replacing(self, agent: str) -> bool:
        return any(agent in services and group.replacing() for group, services in self.groups)


async def _served_as(function: str) -> list[str]:
    """The services `function` is served as: a hosted NeMo Gym server (`nemo-gym:<server>`)
    as its environment and its agents, read from its config."""
    if not is_nemo_gym(function):
        return [function]
    hosted = await asyncio.to_thread(outline, function.removeprefix(PREFIX))
    return [hosted.name, *hosted.agents]


async def _serve(
    bus: Bus, config: dict[str, Any], own: str, stop: asyncio.Event, timeouts: Timeouts, workers: LocalWorkers
) -> None:
    layout = Layout.from_nemo_gym(config, own)
    front = await FrontBus.open(bus, timeouts=timeouts, workers=workers)
    runners: list[web.AppRunner] = []
    try:
        # Its own port last: NeMo Gym counts the front ready once that one answers.
        for server in (*layout.servers[1:], layout.servers[0]):
            runner = web.AppRunner(app_for(server, layout, front), access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.SockSite(runner, server.sock, shutdown_timeout=1.0).start()
        log.info("serving %s for NeMo Gym", ", ".join(server.name for server in layout.servers))
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()
        layout.close()
        await front.close()
