"""A two-skill tool task for the tool-learning test: `city_weather`, an environment of the
tests' own, served from this file (`gym-runner serve tests/weather_task.py`).

A row asks for the weather in one of four cities (`A`..`D`). The one tool,
`get_weather(city)`, answers that city's degrees, drawn afresh for every rollout (from its
session id) out of four values, so no policy can know them without calling it. The reward
has two halves:

- 0.5 when the rollout's first tool call names the row's city (the key, read from the
  prompt: one right out of four);
- 0.5 when the final answer names exactly one number and it is the degrees that first call
  returned (the tool's output, used in the answer), whichever city it named.

Each half rewards one skill whatever the other did. With the second half for the row's
city's degrees instead, using the tool's output paid only once the city was right, so its
signal came too late in the test's run to be learned. Every key and value is one token of
the tiny model's tokenizer wherever it appears (the prompt, the call's arguments, the
tool's JSON output, the answer), so each skill is copying a token from the right place.

The tool answers the degrees alone (`{"degrees":6}`). With the city beside them
(`{"city":"A","degrees":6}`), the answer's copy of the degrees was not learned, neither by
the tool-learning test nor by GRPO probes on the answer's value token alone, which learned
it without the city.

A policy that calls a random city and answers a random value scores 0.25 on average; one
that answers without calling, 0.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from msgspec import Struct

from gymbus.functions import Environment, Session, VerifyRequest, VerifyResult, tool
from gymbus.schemas import Item, function_calls, output_text

__all__ = [
    "AGENT",
    "CITIES",
    "DEGREES",
    "ENVIRONMENT",
    "NAME",
    "PROMPTS",
    "TOOLS",
    "Forecast",
    "answer_number",
    "degrees_of",
    "task_rows",
]

NAME = "city_weather"
AGENT = "city_weather_simple_agent"
CITIES = ("A", "B", "C", "D")
DEGREES = (2, 4, 6, 8)
PROMPTS = ("what is the weather in city {city}", "how warm is city {city} today")
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
"""The rows' tools, in the Responses API's form."""
_NUMBER = re.compile(r"\d+")


class City(Struct, kw_only=True):
    city: str


class Forecast(Struct, kw_only=True):
    degrees: int


def degrees_of(session_id: str, city: str) -> int:
    """`city`'s degrees in the rollout of `session_id`: one of `DEGREES`, fixed per rollout."""
    digest = hashlib.sha256(f"{session_id}:{city}".encode()).digest()
    return DEGREES[digest[0] % len(DEGREES)]


async def get_weather(args: City, session: Session) -> Forecast:
    """The degrees in `args.city` for this rollout."""
    return Forecast(degrees=degrees_of(session.id, args.city))


def answer_number(text: str) -> int | None:
    """The one number `text` names; `None` if it names none or several."""
    numbers = _NUMBER.findall(text)
    return int(numbers[0]) if len(numbers) == 1 else None


class CityVerify(VerifyRequest, kw_only=True):
    city: str


class CityVerdict(VerifyResult, kw_only=True):
    right_city: bool
    used_output: bool


def _first_city(items: list[Item]) -> str | None:
    calls = function_calls(items)
    if not calls:
        return None
    try:
        arguments = json.loads(str(calls[0].arguments or ""))
    except ValueError:
        return None
    return arguments.get("city") if isinstance(arguments, dict) else None


async def verify(request: CityVerify, session: Session) -> CityVerdict:
    """Half for calling the row's city first, half for answering what that call returned."""
    called = _first_city(request.response.output)
    right_city = called == request.city
    answer = answer_number(output_text(request.response))
    used_output = called is not None and answer == degrees_of(session.id, called)
    return CityVerdict(
        reward=0.5 * right_city + 0.5 * used_output, right_city=right_city, used_output=used_output
    )


ENVIRONMENT = Environment(
    name=NAME,
    tools=(tool(get_weather),),
    verify=verify,
    verify_request=CityVerify,
    agents=(AGENT,),
    max_steps=3,
    description="The tests' tool task: call get_weather for the prompt's city, answer its degrees.",
)


def task_rows(path: Path) -> Path:
    """Every prompt for every city, one row each, written to `path` (JSONL)."""
    with open(path, "w") as out:
        for template in PROMPTS:
            for city in CITIES:
                params = {"input": [{"role": "user", "content": template.format(city=city)}], "tools": TOOLS}
                row = {
                    "responses_create_params": params,
                    "city": city,
                    "agent_ref": {"type": "responses_api_agents", "name": AGENT},
                }
                out.write(json.dumps(row) + "\n")
    return path
