"""Worker processes only benchmarks use; each prints `ready:` once it serves.

python -m bench.workers echo                 raw nats-py echo on `bench.echo` (the yardstick)
python -m bench.workers slow-model SECONDS   the offline policy answering after SECONDS
python -m bench.workers instant-agent        an agent that rewards each task without any call
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping

from nats.aio.msg import Msg

from gymbus import bus, schemas
from gymbus.bus import model_service
from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import Response, ResponsesCreateParams, merge_row

ECHO = "bench.echo"
WEATHER_AGENT = "example_single_tool_call_simple_agent"
_MANY = 65536  # in-flight bound high enough for 16,384 rollouts


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready:", flush=True)
    await stop.wait()


async def echo() -> None:
    """Raw nats-py: reply to each request from the subscription callback itself."""
    nc = await bus.connect(os.environ["NATS_URL"], name="bench-echo")

    async def reply(msg: Msg) -> None:
        await nc.client.publish(msg.reply, msg.data)

    await nc.client.subscribe(ECHO, queue="echo", cb=reply)
    await nc.client.flush()
    await _until_stopped()
    await nc.close()


async def slow_model(latency: float) -> None:
    """The offline policy served as `policy`, taking `latency` seconds per call."""

    async def generate(params: ResponsesCreateParams) -> Response:
        await asyncio.sleep(latency)
        return await offline_policy(params)

    nc = await bus.connect(os.environ["NATS_URL"], name="bench-slow-model")
    host = bus.ServiceHost(nc)
    spec = model_service("slow", "policy", generate)
    endpoint = spec.endpoints[0]
    spec = bus.ServiceSpec(
        spec.name, spec.kind, (bus.Endpoint(endpoint.name, endpoint.subject, endpoint.handler, _MANY),)
    )
    await host.add(spec)
    await _until_stopped()
    await host.stop()
    await nc.close()


async def instant_agent() -> None:
    """The weather agent's task queue, each task answered with reward 1.0 and no calls:
    the runner's side of a collection, measured alone."""

    async def run(row: bytes, headers: Mapping[str, str]) -> bytes:
        return merge_row(row, reward=1.0)

    nc = await bus.connect(os.environ["NATS_URL"], name="bench-instant-agent")
    host = bus.ServiceHost(nc)
    await host.add(bus.ServiceSpec(WEATHER_AGENT, "agent", ()))  # so runners see the agent served
    limits = schemas.Limits(agent_concurrency=4096)
    worker = bus.TaskConsumer(nc, WEATHER_AGENT, run, limits)
    await worker.start()
    await _until_stopped()
    await worker.stop()
    await host.stop()
    await nc.close()


def main() -> None:
    bus.tune_gc()
    kind = sys.argv[1]
    if kind == "echo":
        asyncio.run(echo())
    elif kind == "slow-model":
        asyncio.run(slow_model(float(sys.argv[2])))
    elif kind == "instant-agent":
        asyncio.run(instant_agent())
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
