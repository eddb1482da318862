"""`example_multi_turn`: a conversation with a simulated user who wants the weather in
several cities, asking for them one at a time. It shows the multi-turn agent.

Its agent `example_multi_turn_agent` is a `multi_turn_agent`: after each reply of the
policy, a user simulator (the model served as `user_simulator`) writes the next user
message from the row's `user_persona` and `user_goal`, until it says the goal is met or
`max_user_turns` messages were sent.

Tool: `get_weather(city)` → `{"city": ..., "weather_description": "The weather in <city>
is <sky>."}`, where the sky is fixed per city (a hash of its name), so reruns agree.

Reward: 1.0 iff every city in the row's `expected_cities` was looked up with
`get_weather` somewhere in the conversation (names compared case-insensitively, spaces
trimmed), else 0.0. Adds `looked_up_cities` and `missing_cities` (both sorted, lower
case). A row without `expected_cities` is a bad request.
"""

from __future__ import annotations

import hashlib
import json

from gymbus.schemas import Item, VerifyRequest, VerifyResult

from .._spec import Environment, Session, tool
from .example_single_tool_call import GetWeather, Weather

__all__ = ["ENVIRONMENT", "looked_up_cities"]

_SKIES = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy")


async def get_weather(args: GetWeather, session: Session) -> Weather:
    """The weather in `args.city`: the same sky every time for the same city."""
    digest = hashlib.blake2b(_city_key(args.city).encode(), digest_size=2).digest()
    sky = _SKIES[int.from_bytes(digest, "big") % len(_SKIES)]
    return Weather(city=args.city, weather_description=f"The weather in {args.city} is {sky}.")


def _city_key(city: str) -> str:
    return " ".join(city.split()).lower()


class MultiTurnVerifyRequest(VerifyRequest, kw_only=True):
    expected_cities: list[str]


class MultiTurnVerifyResult(VerifyResult, kw_only=True):
    looked_up_cities: list[str]
    missing_cities: list[str]


def looked_up_cities(items: list[Item]) -> set[str]:
    """The cities of every `get_weather` call among `items`, lower case."""
    cities = set()
    for item in items:
        if item.kind == "function_call" and item.name == "get_weather":
            try:
                city = json.loads(str(item.arguments)).get("city")
            except (ValueError, AttributeError):  # not JSON, or not an object
                continue
            if isinstance(city, str):
                cities.add(_city_key(city))
    return cities


async def verify(request: MultiTurnVerifyRequest, session: Session) -> MultiTurnVerifyResult:
    """1.0 iff every expected city was looked up."""
    found = looked_up_cities(request.response.output)
    missing = {_city_key(city) for city in request.expected_cities} - found
    return MultiTurnVerifyResult(
        reward=0.0 if missing else 1.0, looked_up_cities=sorted(found), missing_cities=sorted(missing)
    )


ENVIRONMENT = Environment(
    name="example_multi_turn",
    tools=(tool(get_weather),),
    verify=verify,
    verify_request=MultiTurnVerifyRequest,
    agents=("example_multi_turn_agent",),
    agent_kind="multi_turn_agent",
    description="A simulated user asks for the weather in several cities, one at a time.",
)
