"""`gym-runner talk`: one prompt to an agent on the bus, and its whole answer printed.

NeMo Gym's quickstart step "talk to your agent once", without a dataset: the agent's
loop runs here over the bus (`bus.front.talk`), offered its environment's tools, and
each model turn, tool call and tool output is printed as it appears in the response.

With `NATS_URL`, the environment and model are those served there, and this process
runs the agent's loop with the agent's own credentials (`agent-<name>`). With none, it
starts an embedded server and, as `collect` does, worker processes serving the agent's
environment and its policy (the offline policy, a model at `--model-url`, or a model of
one's own), and stops them at the end.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec

from gymbus.bus import Bus, ServeOptions, open_bus
from gymbus.bus.front import talk
from gymbus.functions import Agent, ModelOptions
from gymbus.functions.registry import ENVIRONMENTS, policy_adapter
from gymbus.schemas import DEFAULT_TIMEOUTS, Item, Response, ResponsesCreateParams, Timeouts, Tool, item_text

from .._own import OwnChoice
from .._workers import Supervised, WorkerProcesses, start_workers, stop_workers

__all__ = ["conversation_lines", "talk_once", "tools_of"]


def tools_of(agent: Agent) -> list[Tool]:
    """The function tools of `agent`'s environment, with their arguments' JSON Schemas."""
    environment = ENVIRONMENTS.get(agent.environment)
    if environment is None:
        return []
    return [Tool(name=tool.name, description="", parameters=_schema(tool.args_type), strict=False)
            for tool in environment.tools]  # fmt: skip


def _schema(args_type: type) -> dict[str, Any]:
    (schema,), components = msgspec.json.schema_components([args_type], ref_template="#/$defs/{name}")
    name = schema["$ref"].rsplit("/", 1)[-1]
    inlined: dict[str, Any] = dict(components.pop(name))
    if components:
        inlined["$defs"] = components
    return inlined


async def talk_once(
    agent: Agent,
    prompt: str,
    system: str | None,
    nats_url: str | None,
    chosen: OwnChoice | None = None,
    model: ModelOptions | None = None,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> Response:
    """`agent`'s response to `prompt` (after `system`, if given), its tools offered: on the
    bus at `nats_url`, or on an embedded one with the workers it needs (see the module):
    the policy `chosen` names (`--model FILE`), else the adapter `model` calls for."""
    items = ([Item(role="system", content=system)] if system else []) + [Item(role="user", content=prompt)]
    tools = tools_of(agent)
    params = ResponsesCreateParams(input=items, tools=tools or msgspec.UNSET)
    role = f"agent-{agent.name}" if nats_url else "runner"
    async with open_bus(nats_url, name="gym-runner talk", timeouts=timeouts, role=role) as bus:
        if bus.embedded is None:
            return await talk(bus, agent, params, timeouts)
        with tempfile.TemporaryDirectory(prefix="gymbus-talk-") as work:
            log = Path(work) / "workers.log"
            workers = await _start_workers(bus, agent, chosen or OwnChoice(), model, log, timeouts)
            try:
                # The embedded server's runner may not call an environment: its workers may.
                async with open_bus(
                    bus.url, name="gym-runner talk", timeouts=timeouts, auth=bus.worker_auth(), role="worker"
                ) as calls:
                    return await talk(calls, agent, params, timeouts)
            finally:
                await stop_workers(workers, timeouts.drain)


async def _start_workers(
    bus: Bus, agent: Agent, chosen: OwnChoice, model: ModelOptions | None, log: Path, timeouts: Timeouts
) -> Supervised:
    """One worker serving `agent`'s environment and its policy model (under the name the
    agent calls it), and one per other model it calls (a user simulator), by the same adapter."""
    policy = chosen.own.for_worker([chosen.policy or policy_adapter(model)])
    serve = ServeOptions(
        functions=(*chosen.own.for_worker([agent.environment]), *policy),
        model=model or ModelOptions(),
        served_model=agent.model,
        timeouts=timeouts,
    )
    auth = bus.worker_auth()
    groups = [
        (WorkerProcesses(serve, bus.url, log, auth=auth), [agent.environment, agent.model]),
        *(
            (WorkerProcesses(ServeOptions(policy, serve.model, other, timeouts=timeouts), bus.url, log, auth=auth),
             [other])
            for other in agent.other_models
        ),
    ]  # fmt: skip
    return await start_workers(bus, groups, timeouts)


def conversation_lines(response: Response) -> list[tuple[str, str]]:
    """(who, what) per output item: the model's messages and reasoning, its tool calls and
    their outputs, in order."""
    lines = []
    for item in response.output:
        kind = item.kind
        if kind == "message":
            lines.append(("model", item_text(item)))
        elif kind == "function_call":
            lines.append(("tool call", f"{_text(item.name)}({_text(item.arguments)})"))
        elif kind == "function_call_output":
            output = item.output
            text = output if isinstance(output, str) else msgspec.json.encode(output).decode()
            lines.append(("tool output", text))
        elif kind == "reasoning" and isinstance(item.summary, list):
            lines.append(("reasoning", " ".join(str(getattr(part, "text", "")) for part in item.summary)))
    return lines


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
