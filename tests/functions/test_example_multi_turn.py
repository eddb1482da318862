"""`example_multi_turn`: its deterministic weather tool and its reward rule."""

from __future__ import annotations

import json

import pytest

from gymbus import bus, schemas
from gymbus.functions import Session
from gymbus.functions.environments.example_multi_turn import (
    GetWeather,
    MultiTurnVerifyRequest,
    get_weather,
    verify,
)
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import Item, Response, ResponsesCreateParams


async def test_the_weather_is_the_same_for_the_same_city_whatever_its_case() -> None:
    paris = await get_weather(GetWeather(city="Paris"), Session(id="s"))
    again = await get_weather(GetWeather(city=" paris "), Session(id="t"))
    assert paris.weather_description.startswith("The weather in Paris is ")
    assert paris.weather_description.split()[-1] == again.weather_description.split()[-1]


def calls(*arguments: str) -> list[Item]:
    return [
        Item(type="function_call", name="get_weather", arguments=a, call_id=str(i))
        for i, a in enumerate(arguments)
    ]


async def reward(output: list[Item], expected: list[str]) -> tuple[float, list[str], list[str]]:
    request = MultiTurnVerifyRequest(
        responses_create_params=ResponsesCreateParams(input="hi"),
        response=Response(id="r", created_at=0, model="m", output=output),
        expected_cities=expected,
    )
    result = await verify(request, Session(id="s"))
    return result.reward, result.looked_up_cities, result.missing_cities


@pytest.mark.parametrize(
    ("output", "expected", "result"),
    [
        (calls('{"city": "Paris"}', '{"city": "Tokyo"}'), ["Paris", "Tokyo"], (1.0, ["paris", "tokyo"], [])),
        (calls('{"city": "tokyo "}', '{"city": "PARIS"}'), ["Paris", "Tokyo"], (1.0, ["paris", "tokyo"], [])),
        (calls('{"city": "Paris"}', '{"city": "Lima"}', '{"city": "Tokyo"}'), ["Paris", "Tokyo"],
         (1.0, ["lima", "paris", "tokyo"], [])),  # extra cities are fine
        (calls('{"city": "Paris"}'), ["Paris", "Tokyo"], (0.0, ["paris"], ["tokyo"])),
        ([], ["Paris"], (0.0, [], ["paris"])),
        (calls("{not json", "[1]", '{"city": 7}', '{"town": "Paris"}'), ["Paris"], (0.0, [], ["paris"])),
        ([Item(type="function_call", name="get_time", arguments='{"city": "Paris"}', call_id="x")], ["Paris"],
         (0.0, [], ["paris"])),  # another tool does not count
    ],
)  # fmt: skip
async def test_reward_is_one_iff_every_expected_city_was_looked_up(
    output: list[Item], expected: list[str], result: tuple[float, list[str], list[str]]
) -> None:
    assert await reward(output, expected) == result


def test_a_row_without_expected_cities_is_a_bad_request() -> None:
    body = {
        "responses_create_params": {"input": "hi"},
        "response": {"id": "r", "created_at": 0, "model": "m", "output": []},
    }
    env = ENVIRONMENTS["example_multi_turn"]
    with pytest.raises(schemas.BadRequest, match="expected_cities"):
        bus.wire.decode(json.dumps(body).encode(), env.verify_request, "verify request")
