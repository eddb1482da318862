"""P12: what a rollout costs through a hosted NeMo Gym agent.

NeMo Gym's own `gymnasium_agent` plays `example_multi_turn_gymnasium`'s example rows (a reset,
then per turn one model call and one step: two or three turns), with a model that answers
at once with a fixed text, two ways, each first one rollout at a time (latency) and then
`concurrency` in flight (rate, and CPU per rollout of each process):

- direct: the agent's `/run` over HTTP, the agent calling the server process and a model
  server over loopback HTTP, as NeMo Gym runs them (the same processes the bridge starts,
  with a global config naming their ports);
- hosted: `gym.agent.example_multi_turn_gymnasium_agent.run` on the bus, served by `gym-runner
  serve nemo-gym:example_multi_turn_gymnasium`: the agent's calls go through the bridge's
  shims as the rollout's own calls (`gym.model.policy.responses`, `gym.env.<env>.seed` and
  `.tool.step`, through the hosted server's proxy).

The bridge's added cost per rollout is hosted minus direct; the worker's CPU is the part
GymBus spends (shims, bus calls, the server's proxy).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import psutil
from aiohttp import web

from bench._procs import RUNNER, Fleet
from bench.nemo_gym import measure
from gymbus import bus
from gymbus.functions.nemo_gym import locate, prepare
from gymbus.functions.nemo_gym._config import agent_config, global_config, read_config
from gymbus.functions.nemo_gym._process import ServerProcess
from gymbus.functions.nemo_gym._venv import requirements_of, virtual_env
from gymbus.schemas import ContentPart, Item, Response, ResponsesCreateParams

__all__ = ["RolloutCost", "p12_hosted_agent_cost"]

SERVER = "example_multi_turn_gymnasium"
AGENT = "example_multi_turn_gymnasium_agent"
ANSWER = "The answer is 42."


@dataclass
class RolloutCost:
    latency_ms: float
    """Median milliseconds of one rollout with nothing else in flight."""
    rollouts_per_second: float
    worker_cpu_ms: float
    """CPU milliseconds per rollout of the GymBus worker process (0 for direct HTTP)."""
    nemo_gym_cpu_ms: float
    """CPU milliseconds per rollout of the agent and server processes."""


def p12_hosted_agent_cost(
    samples: int = 100, seconds: float = 5.0, concurrency: int = 16
) -> dict[str, RolloutCost]:
    """`direct` and `hosted` costs of a rollout (see the module docstring)."""
    prepare(SERVER)
    rows = _rows()
    costs = {"direct": asyncio.run(_direct(rows, samples, seconds, concurrency))}
    with Fleet() as fleet:
        worker = fleet.spawn([*RUNNER, "serve", f"nemo-gym:{SERVER}"])
        costs["hosted"] = asyncio.run(_hosted(fleet.url, worker.pid, rows, samples, seconds, concurrency))
    return costs


def _rows() -> list[bytes]:
    example = locate(SERVER)[0] / "data" / "example.jsonl"
    return [line.encode() for line in example.read_text().splitlines() if line.strip()]


def _answer() -> Response:
    part = ContentPart(type="output_text", text=ANSWER, annotations=[])
    item = Item(type="message", id="msg_bench", role="assistant", status="completed", content=[part])
    return Response(id="resp_bench", created_at=time.time(), model="bench", output=[item])


async def _fixed(params: ResponsesCreateParams) -> Response:
    return _answer()


async def _model_server() -> tuple[web.AppRunner, int]:
    """A loopback model server answering every `/v1/responses` at once, as NeMo Gym's would."""
    body = json.dumps({**json.loads(bus.wire.encode(_answer())), "parallel_tool_calls": True, "tool_choice": "auto",
                       "tools": []}).encode()  # fmt: skip

    async def responses(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/responses", responses)

    async def live(request: web.Request) -> web.Response:
        return web.json_response({})

    app.router.add_get("/", live)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, int(runner.addresses[0][1])


async def _direct(rows: list[bytes], samples: int, seconds: float, concurrency: int) -> RolloutCost:
    directory, _ = locate(SERVER)
    server = read_config(directory, None)
    env = virtual_env(requirements_of(directory), SERVER, directory)
    (agent,) = [one for one in server.agents if one.name == AGENT]
    model, model_port = await _model_server()
    ports = {name: model_port for name in ("policy_model", *agent.models)}
    config = global_config(server, server.block, ports)
    resources = ServerProcess(SERVER, env, server.app, server.instance, config)
    site = env.site_packages() / "responses_api_agents" / agent.kind
    player: ServerProcess | None = None
    try:
        info = await resources.start()
        player = ServerProcess(
            AGENT, env, site / "app.py", AGENT, agent_config(server, agent, ports, info.port)
        )
        agent_info = await player.start()
        processes = [psutil.Process(info.pid), psutil.Process(agent_info.pid)]
        async with aiohttp.ClientSession() as http:
            turn = 0

            async def run() -> object:
                nonlocal turn
                turn += 1
                async with http.post(f"http://127.0.0.1:{agent_info.port}/run", data=rows[turn % len(rows)],
                                     headers={"Content-Type": "application/json"}) as reply:  # fmt: skip
                    assert reply.status == 200, await reply.text()
                    return await reply.read()

            return await _measure(run, processes, None, samples, seconds, concurrency)
    finally:
        if player is not None:
            player.stop()
        resources.stop()
        await model.cleanup()


async def _hosted(
    url: str, worker_pid: int, rows: list[bytes], samples: int, seconds: float, concurrency: int
) -> RolloutCost:
    nc = await bus.connect(url, name="bench-p12")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("fixed", "policy", _fixed))
    try:
        worker = psutil.Process(worker_pid)
        children = worker.children(recursive=True)
        processes = [child for child in children if "_launcher.py" in " ".join(child.cmdline())]
        subject = bus.subjects.agent_run(AGENT)
        turn = 0

        async def run() -> object:
            nonlocal turn
            turn += 1
            reply = await bus.request(nc, subject, rows[turn % len(rows)], timeout=60)
            assert b"_ng_failure_class" not in reply, reply[:500]
            return reply

        return await _measure(run, processes, worker, samples, seconds, concurrency)
    finally:
        await host.stop()
        await nc.close()


async def _measure(
    call: Callable[[], Awaitable[object]], nemo_gym: list[psutil.Process], worker: psutil.Process | None,
    samples: int, seconds: float, concurrency: int,
) -> RolloutCost:  # fmt: skip
    cost = await measure(call, nemo_gym, worker, samples, seconds, concurrency)
    return RolloutCost(
        latency_ms=cost.latency_ms,
        rollouts_per_second=cost.calls_per_second,
        worker_cpu_ms=cost.worker_cpu_ms,
        nemo_gym_cpu_ms=cost.server_cpu_ms,
    )
