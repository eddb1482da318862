"""`example_multi_step`: synonym tools and NeMo Gym's reward on the last extract call."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gymbus import bus, schemas
from gymbus.functions import Session
from gymbus.functions.environments.example_multi_step import (
    ExtractSynonymValues,
    GetSynonymValue,
    SynonymVerifyRequest,
    extract_synonym_values,
    get_synonym_value,
)
from gymbus.functions.registry import ENVIRONMENTS
from tests.conftest import EXAMPLES

ENV = ENVIRONMENTS["example_multi_step"]
ROW = json.loads((EXAMPLES / "example_multi_step.jsonl").read_text().splitlines()[1])


def extract(values: Any, name: str = "extract_synonym_values") -> dict[str, Any]:
    arguments = values if isinstance(values, str) else json.dumps({"synonym_values": values})
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": "c"}


def lookup(synonym: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "name": "get_synonym_value",
        "arguments": json.dumps({"synonym": synonym}),
    }


async def verify(output: list[dict[str, Any]], **row: Any) -> dict[str, Any]:
    body = {**ROW, **row, "response": {"id": "r", "created_at": 0, "model": "m", "output": output}}
    request = bus.wire.decode(json.dumps(body).encode(), SynonymVerifyRequest)
    return msgspec.to_builtins(await ENV.verify(request, Session(id="s")))  # type: ignore[no-any-return]


async def test_a_synonyms_value_is_the_sum_of_its_code_points() -> None:
    assert (await get_synonym_value(GetSynonymValue(synonym="Arid"), Session(id="s"))).synonym_value == 384
    assert (await get_synonym_value(GetSynonymValue(synonym="Blazing"), Session(id="s"))).synonym_value == 711
    assert (await get_synonym_value(GetSynonymValue(synonym=""), Session(id="s"))).synonym_value == 0
    done = await extract_synonym_values(ExtractSynonymValues(synonym_values=[384, 279]), Session(id="s"))
    assert msgspec.to_builtins(done) == {"success": True}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (0, b"{}", "missing required field `synonym`"),
        (0, b'{"synonym": 5}', "Expected `str`, got `int`"),
        (1, b'{"synonym_values": "711"}', "Expected `array`, got `str`"),
        (1, b'{"synonym_values": [711.5]}', "Expected `int`, got `float`"),
    ],
)
def test_wrong_arguments_are_a_readable_bad_request(tool: int, arguments: bytes, message: str) -> None:
    with pytest.raises(schemas.BadRequest, match=message):
        bus.wire.decode(arguments, ENV.tools[tool].args_type, "arguments")


async def test_the_right_values_in_order_earn_one() -> None:
    result = await verify([lookup("Blazing"), lookup("Warm"), extract([711, 407])])
    assert result == {
        "reward": 1.0,
        "parsed_synonym_values": [711, 407],
        "accuracy": True,
        "set_overlap": 1.0,
        "original_term_minefield_hit": False,
        "order_instruction_following_failure": False,
    }


async def test_the_right_values_in_the_wrong_order_earn_zero_and_say_so() -> None:
    result = await verify([extract([407, 711])])
    assert result["reward"] == 0.0 and result["accuracy"] is False
    assert result["set_overlap"] == 1.0 and result["order_instruction_following_failure"] is True


async def test_partial_and_extra_values() -> None:
    partial = await verify([extract([711])])
    assert (partial["reward"], partial["set_overlap"], partial["order_instruction_following_failure"]) == (
        0.0,
        0.5,
        False,
    )
    extra = await verify([extract([711, 407, 5])])
    assert (
        extra["reward"] == 0.0
        and extra["set_overlap"] == 1.0
        and extra["order_instruction_following_failure"]
    )


async def test_only_the_last_extract_call_counts() -> None:
    assert (await verify([extract([711, 407]), extract([1, 2])]))["reward"] == 0.0
    assert (await verify([extract([1, 2]), extract([711, 407])]))["reward"] == 1.0
    namespaced = extract([711, 407], name="mcp__example_multi_step__extract_synonym_values")
    assert (await verify([extract([1]), namespaced]))["reward"] == 1.0


async def test_no_extract_call_means_nothing_was_extracted() -> None:
    result = await verify(
        [lookup("Blazing"), {"type": "message", "role": "assistant", "content": "711, 407"}]
    )
    assert result["reward"] == 0.0 and result["parsed_synonym_values"] == [] and result["set_overlap"] == 0.0


async def test_extracting_the_term_itself_hits_the_minefield() -> None:
    result = await verify([extract([299, 407])])
    assert result["original_term_minefield_hit"] is True and result["reward"] == 0.0
    assert (await verify([extract([299])], minefield_label_value=None))[
        "original_term_minefield_hit"
    ] is False


async def test_whole_floats_count_as_integers() -> None:
    result = await verify([extract([711.0, 407])])
    assert result["reward"] == 1.0 and result["parsed_synonym_values"] == [711, 407]


@pytest.mark.parametrize(
    "arguments",
    ["not json", '{"synonym_values": "711, 407"}', '{"synonym_values": [711.5, 407]}', '["x"]', "{}"],
)
async def test_a_malformed_last_extract_call_earns_zero_with_a_reason(arguments: str) -> None:
    result = await verify([extract([711, 407]), extract(arguments)])
    assert result["reward"] == 0.0 and result["error_type"] == "malformed_extract_call"
    assert result["parsed_synonym_values"] == [] and result["accuracy"] is False


@pytest.mark.parametrize(
    "row",
    [
        {"expected_synonym_values": None},
        {"expected_synonym_values": "711"},
        {"expected_synonym_values": [True]},
    ],
)
async def test_a_row_without_valid_expected_values_earns_zero_with_a_reason(row: dict[str, Any]) -> None:
    result = await verify([extract([711, 407])], **row)
    assert result["reward"] == 0.0 and result["error_type"] == "invalid_expected_synonym_values"
    body = {k: v for k, v in ROW.items() if k != "expected_synonym_values"}
    body["response"] = {"id": "r", "created_at": 0, "model": "m", "output": [extract([711, 407])]}
    missing = await ENV.verify(
        bus.wire.decode(json.dumps(body).encode(), SynonymVerifyRequest), Session(id="s")
    )
    assert missing.reward == 0.0 and missing.error_type == "invalid_expected_synonym_values"


async def test_an_empty_expected_list_is_met_only_by_extracting_nothing() -> None:
    nothing = await verify([extract([])], expected_synonym_values=[])
    assert (nothing["reward"], nothing["set_overlap"]) == (1.0, 1.0)
    something = await verify([extract([1])], expected_synonym_values=[])
    assert (something["reward"], something["set_overlap"]) == (0.0, 0.0)


def test_agent_name_is_the_one_datasets_use() -> None:
    assert ENV.agents == ("example_multi_step_simple_agent",)
