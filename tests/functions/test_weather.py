"""`example_single_tool_call` behaves as NeMo Gym's weather example."""

from __future__ import annotations

import msgspec

from gymbus.functions import Session
from gymbus.functions.environments.example_single_tool_call import GetWeather, get_weather
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import VerifyRequest


async def test_get_weather_is_always_cold() -> None:
    weather = await get_weather(GetWeather(city="sf"), Session(id="s"))
    assert msgspec.to_builtins(weather) == {"city": "sf", "weather_description": "The weather in sf is cold."}


async def test_verify_always_rewards_one() -> None:
    env = ENVIRONMENTS["example_single_tool_call"]
    request = msgspec.json.decode(
        b'{"responses_create_params": {"input": "hi"}, "response": {"id": "r", "created_at": 0, "model": "m", "output": []}}',
        type=VerifyRequest,
    )
    assert (await env.verify(request, Session(id="s"))).reward == 1.0
    assert env.agents == ("example_single_tool_call_simple_agent",)
