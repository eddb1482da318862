"""`example_single_tool_call`: NeMo Gym's weather example, one tool and a constant reward.

`get_weather(city)` answers `{"city": ..., "weather_description": "The weather in <city>
is cold."}`; every rollout verifies to reward 1.0. It exists to show the plumbing.
"""

from __future__ import annotations

from msgspec import Struct

from gymbus.schemas import VerifyRequest, VerifyResult

from .._spec import Environment, Session, tool


class GetWeather(Struct, kw_only=True):
    city: str


class Weather(Struct, kw_only=True):
    city: str
    weather_description: str


async def get_weather(args: GetWeather, session: Session) -> Weather:
    """The weather in `args.city`: always cold."""
    return Weather(city=args.city, weather_description=f"The weather in {args.city} is cold.")


async def verify(request: VerifyRequest, session: Session) -> VerifyResult:
    """Every rollout earns 1.0."""
    return VerifyResult(reward=1.0)


ENVIRONMENT = Environment(
    name="example_single_tool_call",
    tools=(tool(get_weather),),
    verify=verify,
    agents=("example_single_tool_call_simple_agent",),
    description="NeMo Gym's weather example: one get_weather tool, reward 1.0.",
)
