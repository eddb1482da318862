"""`math_advanced_calculations`: the deliberately wrong calculator and exact float membership."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest

from gymbus import bus, schemas
from gymbus.functions import Session
from gymbus.functions.environments.math_advanced_calculations import CalculationsVerifyRequest, Operands
from gymbus.functions.registry import ENVIRONMENTS
from tests.conftest import EXAMPLES

ENV = ENVIRONMENTS["math_advanced_calculations"]
TOOLS = {tool.name: tool for tool in ENV.tools}
ROW = json.loads((EXAMPLES / "math_advanced_calculations.jsonl").read_text().splitlines()[0])


async def call(name: str, arguments: dict[str, Any]) -> float:
    operands = bus.wire.decode(json.dumps(arguments).encode(), Operands)
    solution = await TOOLS[name].fn(operands, Session(id="s"))
    return msgspec.to_builtins(solution)["solution"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("multiply", {"a": 5.0, "b": 2.0}, 1.1 * 5.0 * 2.0),
        ("divide", {"a": 10.0, "b": 2.0}, 2.5),
        ("add", {"a": 3.0, "b": 7.0}, 3.0 + 7.0 + 1.2),
        ("add", {"a": 1, "b": 3}, 5.2),
        ("subtract", {"a": 15.0, "b": 5.0}, 7.0),
        ("power", {"a": 2.0, "b": 3.0}, 32.0),
        ("log", {"a": 100.0, "base": 8.5}, 2.0),
        ("sin", {"radians": math.pi / 2}, math.cos(math.pi / 2)),
        ("cos", {"radians": math.pi}, math.sin(math.pi)),
        ("pi", {}, math.e),
        ("negate", {"a": 7.0}, 7.0),
        ("return_constant", {"a": 42.0}, 42.0),
        ("add", {"a": 1.0, "b": 3.0, "radians": None, "base": None}, 5.2),
        ("add", {"a": 1.0, "b": 3.0, "comment": "ignored, as NeMo Gym ignores it"}, 5.2),
    ],
)
async def test_every_tool_is_wrong_in_its_own_way(
    name: str, arguments: dict[str, Any], expected: float
) -> None:
    assert await call(name, arguments) == expected


def test_the_calculator_offers_the_eleven_tools() -> None:
    assert set(TOOLS) == {
        "multiply",
        "divide",
        "add",
        "subtract",
        "power",
        "log",
        "sin",
        "cos",
        "pi",
        "negate",
        "return_constant",
    }
    assert ENV.agents == ("math_advanced_calculations_simple_agent",)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("add", {"a": 1.0}, "add takes a, b: missing b"),
        ("pi", {"a": 1.0}, "pi takes no arguments: unexpected a"),
        ("sin", {"radians": 1.0, "a": 2.0}, "sin takes radians: unexpected a"),
        ("divide", {"a": 1.0, "b": 0.0}, "divide: float division by zero"),
        ("log", {"a": -6.0, "base": 2.0}, "log: math domain error"),
        ("power", {"a": -8.0, "b": -1.5}, "power: the result .* is not a real number"),
        ("power", {"a": 10.0, "b": 400.0}, "power: the result is too large"),
    ],
)
async def test_bad_calls_are_readable_errors(name: str, arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(schemas.BadRequest, match=message):
        await call(name, arguments)


def test_a_wrong_typed_argument_is_a_readable_bad_request() -> None:
    with pytest.raises(schemas.BadRequest, match=r"Expected `float \| null`, got `str` - at `\$.a`"):
        bus.wire.decode(b'{"a": "x", "b": 1.0}', Operands, "arguments of tool add")


def solved(value: Any, call_id: str = "c") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps({"solution": value})}


async def verify(output: list[dict[str, Any]], **row: Any) -> dict[str, Any]:
    body = {**ROW, **row, "response": {"id": "r", "created_at": 0, "model": "m", "output": output}}
    request = bus.wire.decode(json.dumps(body).encode(), CalculationsVerifyRequest)
    return msgspec.to_builtins(await ENV.verify(request, Session(id="s")))  # type: ignore[no-any-return]


ROW_SOLUTIONS = [-3.0, 0.5, 9.9, 0.28366218546322625]  # ground truth of the first example row


async def test_every_ground_truth_value_among_the_outputs_earns_one() -> None:
    assert await verify([solved(v) for v in ROW_SOLUTIONS]) == {"reward": 1.0}
    assert await verify([solved(v) for v in reversed(ROW_SOLUTIONS)] + [solved(123.0)]) == {"reward": 1.0}


async def test_one_missing_value_earns_zero() -> None:
    assert (await verify([solved(v) for v in ROW_SOLUTIONS[:3]]))["reward"] == 0.0


async def test_membership_is_exact_float_equality() -> None:
    nearly = [*ROW_SOLUTIONS[:3], 0.2836621854632263]
    assert (await verify([solved(v) for v in nearly]))["reward"] == 0.0
    assert (await verify([solved(5)], ground_truth="[5.0]"))["reward"] == 1.0
    assert (await verify([solved("5.2")], ground_truth="[5.2]"))["reward"] == 1.0  # float("5.2"), as NeMo Gym


async def test_only_tool_outputs_count() -> None:
    said = {"type": "message", "role": "assistant", "content": json.dumps({"solution": 5.2})}
    call = {"type": "function_call", "name": "add", "arguments": json.dumps({"solution": 5.2})}
    assert (await verify([said, call], ground_truth="[5.2]"))["reward"] == 0.0


async def test_errors_and_unparseable_outputs_are_skipped() -> None:
    error = {
        "type": "function_call_output",
        "call_id": "e",
        "output": '{"error": "divide: float division by zero"}',
    }
    text = {"type": "function_call_output", "call_id": "t", "output": "5.2"}
    null = solved(None)
    assert (await verify([error, text, null, solved(5.2)], ground_truth="[5.2]"))["reward"] == 1.0
    assert (await verify([error, text, null], ground_truth="[5.2]"))["reward"] == 0.0


async def test_an_empty_ground_truth_is_met_by_anything() -> None:
    assert (await verify([], ground_truth="[]"))["reward"] == 1.0


async def test_a_ground_truth_given_as_a_list_works_too() -> None:
    assert (await verify([solved(5.2)], ground_truth=[5.2]))["reward"] == 1.0


@pytest.mark.parametrize(
    ("ground_truth", "error_type"),
    [
        ("not json", "invalid_ground_truth"),
        ("5.2", "invalid_ground_truth"),
        ('["5.2"]', "invalid_ground_truth"),
    ],
)
async def test_a_bad_ground_truth_earns_zero_with_a_reason(ground_truth: str, error_type: str) -> None:
    assert await verify([solved(5.2)], ground_truth=ground_truth) == {"reward": 0.0, "error_type": error_type}


async def test_a_row_without_ground_truth_earns_zero_with_a_reason() -> None:
    body = {k: v for k, v in ROW.items() if k != "ground_truth"}
    body["response"] = {"id": "r", "created_at": 0, "model": "m", "output": [solved(5.2)]}
    request = bus.wire.decode(json.dumps(body).encode(), CalculationsVerifyRequest)
    result = await ENV.verify(request, Session(id="s"))
    assert (result.reward, result.error_type) == (0.0, "missing_ground_truth")
