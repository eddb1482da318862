"""What NeMo Gym's clients call, as calls on the bus: one object for the HTTP front.

- `run`: a whole rollout, as a durable task (`RolloutRequests`);
- `talk`: an agent's loop without a verdict (`talk`);
- `seed`, `tool`, `verify`: an environment's functions in a session the caller names;
- `generate`: a model served on the bus.

Each raises the `GymError` its call failed with; the front maps them to HTTP statuses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gymbus.functions import Agent
from gymbus.schemas import (
    DEADLINE,
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    SESSION,
    Limits,
    NoResponders,
    Response,
    ResponsesCreateParams,
    Timeouts,
    UnknownTool,
)

from ..connection import Bus
from ..wire import subjects
from ._runs import LocalWorkers, Outcome, RolloutRequests
from ._talk import talk

__all__ = ["FrontBus", "Served", "ServedAgent"]


@dataclass(frozen=True)
class ServedAgent:
    """An agent some worker serves, with the environment and model it drives."""

    name: str
    environment: str
    model: str


@dataclass(frozen=True)
class Served:
    """What live workers serve that the front can stand in front of."""

    agents: dict[str, ServedAgent]
    """Each agent by name."""
    environments: frozenset[str]
    """Every environment, with an agent or without (a verifier Unsloth's reward function calls)."""


class FrontBus:
    """The bus as the HTTP front uses it; see the module docstring. Make it with `open`."""

    def __init__(self, bus: Bus, runs: RolloutRequests, timeouts: Timeouts) -> None:
        self._bus = bus
        self._runs = runs
        self._timeouts = timeouts

    @classmethod
    async def open(
        cls,
        bus: Bus,
        *,
        limits: Limits = DEFAULT_LIMITS,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        workers: LocalWorkers | None = None,
    ) -> FrontBus:
        """`workers`: the worker processes the front's own process started (see `RolloutRequests`)."""
        runs = await RolloutRequests.open(bus, limits=limits, timeouts=timeouts, workers=workers)
        return cls(bus, runs, timeouts)

    async def close(self) -> None:
        await self._runs.close()

    async def served(self) -> Served:
        """Every agent and environment a live worker serves."""
        agents, environments = {}, set()
        for info in await self._bus.service_infos(window=self._timeouts.discovery):
            metadata = info.metadata or {}
            if metadata.get("kind") == "agent" and metadata.get("environment"):
                model = metadata.get("model") or "policy"
                agents[info.name] = ServedAgent(info.name, metadata["environment"], model)
            elif metadata.get("kind") == "environment":
                environments.add(info.name)
        return Served(agents, frozenset(environments))

    async def run(self, agent: str, row: bytes) -> Outcome:
        """The rollout of `row` by `agent`, a task on its queue."""
        return await self._runs.run(agent, row)

    async def talk(self, agent: Agent, params: ResponsesCreateParams) -> Response:
        """`agent`'s response to `params`, unverified."""
        return await talk(self._bus, agent, params, self._timeouts)

    async def seed(self, environment: str, row: bytes, session: str) -> bytes:
        return await self._call(subjects.env_seed(environment), row, session, self._timeouts.seed)

    async def tool(self, environment: str, name: str, arguments: bytes, session: str) -> bytes:
        """The tool's output; `UnknownTool` when `environment` is up but has no such tool."""
        try:
            subject = subjects.env_tool(environment, name)
            return await self._call(subject, arguments, session, self._timeouts.tool)
        except NoResponders:
            if await self._bus.served([environment], timeout=self._timeouts.ping):
                raise UnknownTool(f"environment {environment} has no tool named {name!r}") from None
            raise

    async def verify(self, environment: str, row: bytes, session: str) -> bytes:
        """The verdict (`reward` and the verifier's fields) on `row`, which holds the
        task's fields and the `response` to judge."""
        return await self._call(subjects.env_verify(environment), row, session, self._timeouts.verify)

    async def generate(self, model: str, params: bytes) -> bytes:
        """A model's Responses API response to `params` (both encoded)."""
        headers = {DEADLINE: f"{time.time() + self._timeouts.model:.3f}"}
        subject = subjects.model_responses(model)
        return await self._bus.request(subject, params, timeout=self._timeouts.model, headers=headers)

    async def _call(self, subject: str, body: bytes, session: str, timeout: float) -> bytes:
        headers = {SESSION: session, DEADLINE: f"{time.time() + timeout:.3f}"}
        return await self._bus.request(subject, body, timeout=timeout, headers=headers)
