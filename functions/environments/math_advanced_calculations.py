"""`math_advanced_calculations`: NeMo Gym's "alternate universe" calculator.

The model must compute expressions with calculator tools that are deliberately wrong,
so it has to trust the tools over its own arithmetic:

| tool | arguments | answers `{"solution": ...}` with |
| --- | --- | --- |
| `multiply` | a, b | 1.1 · a · b |
| `divide` | a, b | 0.5 · a / b |
| `add` | a, b | a + b + 1.2 |
| `subtract` | a, b | a − b − 3 |
| `power` | a, b | a ** (b + 2) |
| `log` | a, base | log(a) in base abs(base + 1.5) |
| `sin` | radians | cos(radians) |
| `cos` | radians | sin(radians) |
| `pi` | none | e |
| `negate` | a | a |
| `return_constant` | a | a |

As in NeMo Gym, every tool accepts the same optional arguments `a`, `b`, `radians` and
`base`; `null` counts as absent, a missing argument or one the tool does not take is an
error, and so is a math error (division by zero, log of a negative number, overflow,
a complex result). Errors and unknown tool names reach the model as readable
`function_call_output`s.

Reward: 1.0 iff every value of `json.loads(ground_truth)` is among the solutions of the
rollout's `function_call_output`s (exact float membership), else 0.0. A row whose
`ground_truth` is missing or is not a JSON list of numbers gets 0.0 and an `error_type`;
a ground truth given as a list rather than a JSON string is accepted as well.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msgspec import UNSET, Struct, UnsetType

from gymbus.schemas import BadRequest, Item, VerifyRequest, VerifyResult

from .._spec import Environment, Session, Tool

ARGUMENT_NAMES = ("a", "b", "radians", "base")


class Operands(Struct, kw_only=True):
    """The arguments every calculator tool accepts; each tool uses some of them."""

    a: float | None = None
    b: float | None = None
    radians: float | None = None
    base: float | None = None


class Solution(Struct, kw_only=True):
    solution: float


@dataclass(frozen=True)
class Operation:
    """One calculator tool: the arguments it takes, in order, and what it computes."""

    parameters: tuple[str, ...]
    compute: Callable[..., float]


CALCULATOR: dict[str, Operation] = {
    "multiply": Operation(("a", "b"), lambda a, b: 1.1 * a * b),
    "divide": Operation(("a", "b"), lambda a, b: 0.5 * a / b),
    "add": Operation(("a", "b"), lambda a, b: a + b + 1.2),
    "subtract": Operation(("a", "b"), lambda a, b: a - b - 3),
    "power": Operation(("a", "b"), lambda a, b: a ** (b + 2)),
    "log": Operation(("a", "base"), lambda a, base: math.log(a, abs(base + 1.5))),
    "sin": Operation(("radians",), math.cos),
    "cos": Operation(("radians",), math.sin),
    "pi": Operation((), lambda: math.e),
    "negate": Operation(("a",), lambda a: a),
    "return_constant": Operation(("a",), lambda a: a),
}
"""The calculator's tools by name."""


def bind(name: str, operands: Operands) -> list[float]:
    """The tool's arguments in order, or `BadRequest` naming what is missing or extra."""
    given = {key: getattr(operands, key) for key in ARGUMENT_NAMES if getattr(operands, key) is not None}
    wanted = CALCULATOR[name].parameters
    missing = [key for key in wanted if key not in given]
    extra = [key for key in given if key not in wanted]
    if missing or extra:
        takes = ", ".join(wanted) or "no arguments"
        problem = f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(extra)}"
        raise BadRequest(f"{name} takes {takes}: {problem}")
    return [given[key] for key in wanted]


def calculate(name: str, operands: Operands) -> Solution:
    """The tool's solution, or `BadRequest` with the math error."""
    arguments = bind(name, operands)
    try:
        value = CALCULATOR[name].compute(*arguments)
    except OverflowError:  # its message is an errno tuple, not for reading
        raise BadRequest(f"{name}: the result is too large") from None
    except (ArithmeticError, ValueError) as exc:  # division by zero, math domain error
        raise BadRequest(f"{name}: {exc}") from None
    if isinstance(value, complex):  # a negative base to a fractional power
        raise BadRequest(f"{name}: the result {value} is not a real number")
    return Solution(solution=float(value))


def calculator_tool(name: str) -> Tool:
    async def run(operands: Operands, session: Session) -> Solution:
        return calculate(name, operands)

    return Tool(name=name, fn=run, args_type=Operands)


class CalculationsVerifyRequest(VerifyRequest, kw_only=True):
    # Typed loosely so a wrong-typed row is reward 0 with a reason, not a rejected request.
    ground_truth: Any = UNSET


class CalculationsVerdict(VerifyResult, kw_only=True):
    error_type: str | UnsetType = UNSET


def solution_of(item: Item) -> float | None:
    """The `solution` a tool output reports, or None (an error, or not a number)."""
    try:
        return float(json.loads(item.output)["solution"])  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError, IndexError, OverflowError):
        return None


def expected_values(ground_truth: Any) -> list[float] | None:
    """The ground truth's values: a JSON string of a list of numbers (or such a list)."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except ValueError:
            return None
    if not isinstance(ground_truth, list):
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in ground_truth):
        return None
    return [float(v) for v in ground_truth]


async def verify(request: CalculationsVerifyRequest, session: Session) -> CalculationsVerdict:
    """Reward 1.0 iff every ground-truth value is among the tool outputs' solutions."""
    if request.ground_truth is UNSET:
        return CalculationsVerdict(reward=0.0, error_type="missing_ground_truth")
    expected = expected_values(request.ground_truth)
    if expected is None:
        return CalculationsVerdict(reward=0.0, error_type="invalid_ground_truth")
    outputs = [item for item in request.response.output if item.kind == "function_call_output"]
    solutions = [solution_of(item) for item in outputs]
    return CalculationsVerdict(reward=float(all(value in solutions for value in expected)))


ENVIRONMENT = Environment(
    name="math_advanced_calculations",
    tools=tuple(calculator_tool(name) for name in CALCULATOR),
    verify=verify,
    verify_request=CalculationsVerifyRequest,
    agents=("math_advanced_calculations_simple_agent",),
    description="NeMo Gym's alternate-universe calculator: deliberately wrong tools, exact values.",
)
