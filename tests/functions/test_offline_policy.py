"""The offline policy's generic behaviours, on made-up tasks: which tool it calls, the
arguments it reads from a schema and the prompt, and each answer format it writes."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import msgspec
import pytest

from gymbus.functions.agents.multi_turn_agent import SIMULATOR_INSTRUCTIONS, STOP_MARKER
from gymbus.functions.environments.equivalence_llm_judge import JUDGE_PROMPT as EQUIVALENCE_PROMPT
from gymbus.functions.environments.math_with_judge import JUDGE_PROMPT as MATH_JUDGE_PROMPT
from gymbus.functions.environments.math_with_judge import JUDGE_SYSTEM as MATH_JUDGE_SYSTEM
from gymbus.functions.models.offline import arguments, offline_policy, schema_instance
from gymbus.schemas import Item, Response, ResponsesCreateParams, output_text


def tool(name: str, description: str = "", **properties: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "function", "name": name, "description": description, "parameters": schema}


STRING = {"type": "string"}
TICKETS = tool("t1", "Open a support ticket for a customer complaint", summary=STRING)
FLIGHTS = tool("t2", "Book a flight between two airports", origin=STRING, destination=STRING)
RATES = tool("t3", "Convert an amount of money between currencies", amount={"type": "number"})


def params(
    prompt: str, tools: list[dict[str, Any]] | None = None, *extra: Item, **fields: Any
) -> ResponsesCreateParams:
    items = [Item(role="user", content=prompt), *extra]
    body = {"input": msgspec.to_builtins(items), "tools": tools or [], **fields}
    return msgspec.convert(body, ResponsesCreateParams)


async def reply(
    prompt: str, tools: list[dict[str, Any]] | None = None, *extra: Item, **fields: Any
) -> Response:
    return await offline_policy(params(prompt, tools, *extra, **fields))


def called(response: Response) -> tuple[str, dict[str, Any]]:
    [call] = response.output
    assert call.kind == "function_call" and call.call_id
    return str(call.name), json.loads(str(call.arguments))


def tool_turn(output: str) -> tuple[Item, Item]:
    call = Item(type="function_call", name="t", arguments="{}", call_id="c1")
    return call, Item(type="function_call_output", call_id="c1", output=output)


# which tool


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("I want to book a flight to Lisbon", "t2"),
        ("Convert 20 euros into another currency, please", "t3"),
        ("My customer has a complaint about the delivery", "t1"),
        ("Hello there", "t1"),  # no word in common: the first tool
    ],
)
async def test_it_calls_the_tool_whose_description_shares_most_words_with_the_prompt(
    prompt: str, expected: str
) -> None:
    name, _ = called(await reply(prompt, [TICKETS, FLIGHTS, RATES]))
    assert name == expected


async def test_parameter_names_count_as_a_tools_words_nested_ones_too() -> None:
    nested = {"type": "object", "properties": {"release_year": {"type": "integer"}}}
    film = tool("record_b", "Record a structured answer", movie=nested)
    other = tool("record_a", "Record a structured answer", person={"type": "object", "properties": {}})
    name, _ = called(await reply("Which release year did the film have?", [other, film]))
    assert name == "record_b"


async def test_a_tool_that_needs_a_url_is_called_only_when_the_prompt_has_one() -> None:
    browse = tool("browse", "Open a web page and read the page content", url=STRING)
    search = tool("search", "Search for a query", query=STRING)
    assert called(await reply("Read the page content about owls", [browse, search]))[0] == "search"
    name, args = called(
        await reply("Read the page content at https://example.org/owls now", [browse, search])
    )
    assert (name, args) == ("browse", {"url": "https://example.org/owls"})


# which arguments


@pytest.mark.parametrize(
    ("prompt", "city"),
    [
        ('Check "New Orleans" for me', "New Orleans"),  # quoted text first
        ("Is it raining in Lima today?", "Lima"),  # capitalised words past a sentence's start
        ("what's the weather like in sf?", "sf"),  # the phrase after the last preposition
        ("forecast for the north coast please", "north coast"),  # stop words dropped
        ("how's the outside?", "outside"),  # else the last word that is not a stop word
    ],
)
async def test_a_string_argument_is_the_prompts_subject(prompt: str, city: str) -> None:
    assert called(await reply(prompt, [tool("get_weather", city=STRING)]))[1] == {"city": city}


async def test_numbers_enums_and_named_values_come_from_the_prompt() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "number"},
            "b": {"type": "integer"},
            "unit": {"enum": ["kilogram", "pound"]},
            "label": {"type": "string"},
            "page": {"type": "integer"},
            "verbose": {"type": "boolean"},
        },
        "required": ["a", "b", "unit", "label"],
    }
    assert arguments(schema, "add 2.5 and 7 in pound, label: groceries") == {
        "a": 2.5, "b": 7, "unit": "pound", "label": "groceries",
    }  # fmt: skip
    assert arguments(schema, "add 1 and 2, label=x, page: 3")["page"] == 3  # an optional one the prompt names
    assert arguments(schema, "no numbers here")["a"] == 0


async def test_a_free_text_parameter_gets_the_prompts_first_line() -> None:
    search = tool("search", "Search the web", query=STRING)
    _, args = called(await reply("Who wrote The Hobbit?\nA: Tolkien\nB: Lewis", [search]))
    assert args == {"query": "Who wrote The Hobbit?"}


async def test_without_a_required_list_every_parameter_is_filled() -> None:
    schema = {"type": "object", "properties": {"q": STRING, "limit": {"type": "integer"}}}
    assert arguments(schema, "find budget emails, 5 of them") == {
        "q": "find budget emails, 5 of them",
        "limit": 5,
    }


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": ["integer", "null"]},
        "rating": {"type": "number", "minimum": 1},
        "kind": {"enum": ["film", "series"]},
        "cast": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/person"}},
        "status": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
        "version": {"const": 2},
        "notes": {"type": "string"},
    },
    "required": ["title", "year", "rating", "kind", "cast", "status", "version"],
    "additionalProperties": False,
    "$defs": {
        "person": {
            "type": "object",
            "properties": {"actor": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["actor", "age"],
            "additionalProperties": False,
        }
    },
}


@pytest.mark.parametrize("prompt", ["", "Record Alien, a 1979 film starring Sigourney Weaver", "x " * 50])
def test_required_fields_are_always_filled_with_values_the_schema_accepts(prompt: str) -> None:
    value = arguments(SCHEMA, prompt)
    jsonschema.validate(value, SCHEMA)
    assert "notes" not in value  # optional and not named
    jsonschema.validate(schema_instance(SCHEMA), SCHEMA)


def test_arguments_read_numbers_in_order_into_nested_fields() -> None:
    value = arguments(SCHEMA, "Record Alien, a 1979 film rated 8.5 starring Sigourney Weaver, 73")
    assert (value["title"], value["year"], value["rating"], value["kind"]) == ("Alien", 1979, 8.5, "film")
    assert value["cast"][0] == {"actor": "Alien", "age": 73}


# answers


async def test_after_the_tool_output_it_answers_with_the_outputs_text() -> None:
    weather = tool("get_weather", city=STRING)
    result = tool_turn('{"city": "Oslo", "forecast": "Snow all day.", "degrees": -3}')
    response = await reply("weather in Oslo?", [weather], *result)
    assert output_text(response) == "Oslo Snow all day."
    assert response.output[0].role == "assistant"


async def test_one_call_per_user_message() -> None:
    weather = tool("get_weather", city=STRING)
    first = params("weather in Oslo?", [weather], *tool_turn('"cold"'))
    again = msgspec.structs.replace(first, input=[*first.input, Item(role="user", content="and in Rome?")])
    assert called(await offline_policy(again)) == ("get_weather", {"city": "Rome"})


OPTIONS = "Which planet is largest?\nA: Mars, a small red planet\nB) Jupiter, a gas giant\nC. Venus"


@pytest.mark.parametrize(
    ("instruction", "answer"),
    [
        ("Put the letter inside \\boxed{}.", "\\boxed{B}"),
        ("Reply inside <answer></answer> tags.", "<answer>B</answer>"),
        ("", "Answer: B"),
    ],
)
async def test_multiple_choice_gets_the_letter_the_tool_output_supports_in_the_format_asked(
    instruction: str, answer: str
) -> None:
    found = tool_turn('{"results": "Jupiter is the largest planet, a gas giant."}')
    response = await reply(f"{instruction}\n{OPTIONS}", [tool("search", query=STRING)], *found)
    assert output_text(response) == answer


async def test_without_evidence_multiple_choice_gets_the_first_option() -> None:
    assert output_text(await reply(f"Answer in \\boxed{{}}.\n{OPTIONS}")) == "\\boxed{A}"


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("Put the final answer in \\boxed{}.\n\nA farm has 12 cows and 7 hens. How many legs?", "\\boxed{7}"),
        ("Put the final answer in \\boxed{}.\n\nWho painted the ceiling of the chapel?", "\\boxed{chapel}"),
        ("Give the answer in <answer> </answer> tags. How far away is the Moon?", "<answer>Moon</answer>"),
    ],
)
async def test_a_boxed_or_tagged_value_is_a_guess_read_from_the_prompt(prompt: str, answer: str) -> None:
    assert output_text(await reply(prompt)) == answer  # the last number, else the subject: no solving


async def test_a_boxed_value_comes_from_the_tool_output_when_there_is_one() -> None:
    result = tool_turn('{"solution": "The total is 42 apples"}')
    response = await reply(
        "Use the tool; answer in \\boxed{}. 17 rows of 23?", [tool("calc", a=STRING)], *result
    )
    assert output_text(response) == "\\boxed{42}"


async def test_a_prompt_showing_a_json_schema_gets_a_document_valid_for_it() -> None:
    document = json.loads(
        output_text(await reply(f"Return a JSON document for this schema:\n{json.dumps(SCHEMA)}"))
    )
    jsonschema.validate(document, SCHEMA)


async def test_otherwise_it_echoes_the_prompts_first_line() -> None:
    assert output_text(await reply("Tell me about owls.\nThey fly at night.")) == "Tell me about owls."


# judge and simulated user


def judge(
    first: str, second: str, labels: tuple[str, str] = ("[[A=B]]", "[[A!=B]]")
) -> ResponsesCreateParams:
    system = Item(
        role="system", content=f"Say {labels[0]} if the answers are equivalent, {labels[1]} if not."
    )
    prompt = Item(role="user", content=f"Problem:\nQ?\n\nAnswer A:\n{first}\n\nAnswer B:\n{second}")
    return msgspec.convert({"input": msgspec.to_builtins([system, prompt])}, ResponsesCreateParams)


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("the sun", "\\boxed{The Sun.}", True),
        ("$42$", "Working: 6 * 7.\n\n\\boxed{\\text{42}}", True),  # a boxed answer reads as its last box
        ("darwin", "\\boxed{selection}", False),
        ("", "", False),
        ("[[A=B]]", "x", False),  # an answer's own label is not read as the verdict
    ],
)
async def test_as_a_judge_it_says_equal_exactly_when_the_answers_normalise_alike(
    first: str, second: str, same: bool
) -> None:
    verdict = output_text(await offline_policy(judge(first, second)))
    assert verdict.endswith("[[A=B]]" if same else "[[A!=B]]")
    assert ("[[A=B]]" in verdict) != ("[[A!=B]]" in verdict)  # one label only
    labelled = output_text(await offline_policy(judge(first, second, ("[[same]]", "[[different]]"))))
    assert labelled.endswith("[[same]]" if same else "[[different]]")


async def test_as_the_simulated_user_it_states_its_goal_once_then_stops() -> None:
    instructions = SIMULATOR_INSTRUCTIONS.format(persona="A tourist.", goal="I also need a hotel.")
    opening = Item(role="assistant", content="Find me a flight.")
    answer = Item(role="user", content="Booked your flight.")
    first = await reply("unused", None, instructions=instructions)
    request = msgspec.convert(
        {"input": msgspec.to_builtins([opening, answer]), "instructions": instructions}, ResponsesCreateParams
    )
    assert output_text(first) == output_text(await offline_policy(request)) == "I also need a hotel."
    said = Item(role="assistant", content="I also need a hotel.")
    request = msgspec.structs.replace(request, input=[opening, answer, said, answer])
    assert output_text(await offline_policy(request)) == STOP_MARKER


async def test_it_is_deterministic_and_its_ids_differ_between_turns() -> None:
    request = params("humidity in sf", [tool("get_weather", city=STRING)])
    first, second = await offline_policy(request), await offline_policy(request)
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
    answered = await reply("humidity in sf", [tool("get_weather", city=STRING)], *tool_turn('"dry"'))
    assert answered.output[0].id != first.output[0].id
    assert first.usage is not None and first.usage.input_tokens == 3


@pytest.mark.parametrize(
    ("gold", "candidate", "verdict"), [("42", "42", "[[A=B]]"), ("42", "41", "[[A!=B]]")]
)
async def test_as_a_judge_it_reads_the_judge_prompts_the_environments_send(
    gold: str, candidate: str, verdict: str
) -> None:
    equivalence = EQUIVALENCE_PROMPT.format(
        question="What is six times seven?", expected_answer=gold, generated_answer=candidate
    )
    math = MATH_JUDGE_PROMPT.format(
        question="What is six times seven?", first_answer=gold, second_answer=candidate
    )
    for prompt, instructions in ((equivalence, None), (math, MATH_JUDGE_SYSTEM)):
        params = ResponsesCreateParams(input=[Item(role="user", content=prompt)], instructions=instructions)
        assert output_text(await offline_policy(params)).endswith(verdict)
