"""`gym-runner talk`: one prompt to an agent on the bus, and its whole answer printed.

NeMo Gym's quickstart step "talk to your agent once", without a dataset: the agent's
loop runs here over the bus (`FrontBus.talk`), offered its environment's tools, and
each model turn, tool call and tool output is printed as it appears in the response.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gymbus.bus import open_bus
from gymbus.bus.front import FrontBus
from gymbus.functions import ENVIRONMENTS, Agent
from gymbus.schemas import DEFAULT_TIMEOUTS, Item, Response, ResponsesCreateParams, Timeouts, Tool, item_text

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
    agent: Agent, prompt: str, system: str | None, nats_url: str | None, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> Response:
    """`agent`'s response to `prompt` (after `system`, if given), its tools offered."""
    items = ([Item(role="system", content=system)] if system else []) + [Item(role="user", content=prompt)]
    tools = tools_of(agent)
    params = ResponsesCreateParams(input=items, tools=tools or msgspec.UNSET)
    async with open_bus(nats_url, name="gym-runner talk", timeouts=timeouts) as bus:
        front = await FrontBus.open(bus, timeouts=timeouts)
        try:
            return await front.talk(agent, params)
        finally:
            await front.close()


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
