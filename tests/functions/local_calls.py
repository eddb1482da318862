"""`Calls` that run an environment's functions in this process, for rollouts without a bus.

The policy is a model function: the offline policy unless the test passes its own (for a
rollout whose reward the test asserts, a hand-written one: `scripted`). Calls to other
served models (a user simulator) go to `others` by name, else to the policy too.

Arguments and rows are decoded with the same typed decoders the bus hosting uses, so a
wrong-typed argument is the same `BadRequest` the model would read from a worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import count

from gymbus import bus, schemas
from gymbus.functions import Environment, MemoryState, ModelFunction, Session
from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import ContentPart, Item, Response, ResponsesCreateParams, merge_row


class LocalCalls:
    """One rollout's calls to `env` (state in `state`) and to `policy`."""

    def __init__(
        self,
        env: Environment,
        session: str = "local",
        state: MemoryState | None = None,
        policy: ModelFunction = offline_policy,
        others: Mapping[str, ModelFunction] | None = None,
    ) -> None:
        self.env = env
        self.session = Session(id=session, state=state if state is not None else MemoryState())
        self.policy = policy
        self.others = others or {}

    async def seed(self, row: bytes) -> bytes:
        if self.env.seed is not None:
            await self.env.seed(bus.wire.decode(row, self.env.seed_request), self.session)
        return b"{}"

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
        return await self.others.get(model or "", self.policy)(params)

    async def tool(self, name: str, arguments: str) -> str:
        tools = {tool.name: tool for tool in self.env.tools}
        if name not in tools:
            raise schemas.UnknownTool(f"environment {self.env.name} has no tool named {name!r}")
        args = bus.wire.decode(arguments.encode(), tools[name].args_type, f"arguments of tool {name}")
        return bus.wire.encode(await tools[name].fn(args, self.session)).decode()

    async def verify(self, row: bytes, response: Response) -> bytes:
        request = bus.wire.decode(merge_row(row, response=response), self.env.verify_request)
        return bus.wire.encode(await self.env.verify(request, self.session))


def scripted(*turns: list[tuple[str, str]] | str) -> ModelFunction:
    """A hand-written policy: each turn is the tool calls to make (`(name, arguments)` pairs)
    or a final message; it answers the turns in order, whatever it is asked."""
    replies: Iterator[list[tuple[str, str]] | str] = iter(turns)
    call_ids = count()

    async def policy(params: ResponsesCreateParams) -> Response:
        turn = next(replies)
        if isinstance(turn, str):
            content = [ContentPart(type="output_text", text=turn)]
            output = [Item(type="message", role="assistant", content=content)]
        else:
            output = [
                Item(type="function_call", name=name, arguments=arguments, call_id=f"call_{next(call_ids)}")
                for name, arguments in turn
            ]
        return Response(id="resp", created_at=0.0, model="scripted", output=output)

    return policy
