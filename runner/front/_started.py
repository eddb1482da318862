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
2. connects to `NATS_URL`, or starts an embedded nats-server, and starts the workers its
   entry's `serve` names (GymBus's functions, and NeMo Gym servers hosted with their own
   agents, `nemo-gym:<server>`), with the policy served as `policy` by the `vllm` model function
   on the trainer's `policy_base_url` servers (token capture on), or by the offline policy
   when there are none;
3. serves, at the ports NeMo Gym gave them, the config's servers whose implementation is
   `gymbus` (agents and environments; each agent's environment server is NeMo Gym's own
   `legacy_agent` relay to the agent's `/run`), and its own port last.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gymbus.bus import Bus, ServeOptions, open_bus
from gymbus.bus.front import FrontBus
from gymbus.functions import ModelOptions, policy_adapter
from gymbus.functions.nemo_gym import PREFIX, is_nemo_gym, outline
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS

from .._workers import WorkerProcesses
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


async def run_started_front(stop: asyncio.Event) -> None:
    """Serve as NeMo Gym's server `$NEMO_GYM_CONFIG_PATH` until `stop` is set."""
    config = yaml.safe_load(os.environ[CONFIG_DICT])
    own = os.environ[CONFIG_PATH]
    entry = _own_entry(config, own)
    functions = tuple(str(name) for name in entry.get("serve") or ())
    model = policy_of(config)
    options = ServeOptions(
        functions=(*functions, policy_adapter(model)), model=model or ModelOptions(), limits=DEFAULT_LIMITS
    )
    async with open_bus(None, name="gym-runner front (NeMo Gym)") as bus:
        logs = Path(entry.get("log_dir") or tempfile.gettempdir())
        log_file = logs / f"gymbus-front-{os.getpid()}.log"
        workers = WorkerProcesses(options, bus.url, log_file, auth=bus.worker_auth())
        workers.start()
        try:
            names = ["policy"]
            for function in functions:
                names += await _served_as(function)
            await bus.wait_served(names, timeout=DEFAULT_TIMEOUTS.worker_start, check=workers.check)
            await _serve(bus, config, own, stop)
        finally:
            await asyncio.to_thread(workers.stop, DEFAULT_TIMEOUTS.drain)


async def _served_as(function: str) -> list[str]:
    """The services `function` is served as: a hosted NeMo Gym server (`nemo-gym:<server>`)
    as its environment and its agents, read from its config."""
    if not is_nemo_gym(function):
        return [function]
    hosted = await asyncio.to_thread(outline, function.removeprefix(PREFIX))
    return [hosted.name, *hosted.agents]


async def _serve(bus: Bus, config: dict[str, Any], own: str, stop: asyncio.Event) -> None:
    layout = Layout.from_nemo_gym(config, own)
    front = await FrontBus.open(bus)
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
