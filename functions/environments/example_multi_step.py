"""`example_multi_step`: NeMo Gym's multi-step synonym extraction example.

The prompt lists terms and their synonyms; the model finds the term relevant to the
user's question, looks up each of its synonyms' values, then reports them in the order
the synonyms are listed. Tools:

- `get_synonym_value {synonym}` → `{"synonym_value": <sum of the code points of synonym>}`
- `extract_synonym_values {synonym_values: [int]}` → `{"success": true}` (the answer)

Reward: the `synonym_values` of the **last** `extract_synonym_values` call, compared with
the row's `expected_synonym_values`: `reward = float(actual == expected)`, so order
matters. No such call means `actual = []`. The verdict also reports, as NeMo Gym does,
`parsed_synonym_values` (actual), `accuracy` (actual == expected), `set_overlap`
(|set(actual) ∩ set(expected)| / len(expected)), `original_term_minefield_hit` (the
term itself, `minefield_label` or its value `minefield_label_value`, was extracted) and
`order_instruction_following_failure` (the right values in the wrong order).

Where NeMo Gym's verifier would fail with a server error, this one gives reward 0 and
says why in `error_type`: a row whose `expected_synonym_values` is missing or not a list
of integers (`invalid_expected_synonym_values`), or a last extract call whose arguments
are not an object with a list of whole numbers (`malformed_extract_call`). An empty
`expected_synonym_values` has `set_overlap` 1.0 if nothing was extracted, else 0.0.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import UNSET, Struct, UnsetType

from gymbus.schemas import Item, VerifyRequest, VerifyResult

from .._spec import Environment, Session, tool

EXTRACT = "extract_synonym_values"


class GetSynonymValue(Struct, kw_only=True):
    synonym: str


class SynonymValue(Struct, kw_only=True):
    synonym_value: int


class ExtractSynonymValues(Struct, kw_only=True):
    synonym_values: list[int]


class Extracted(Struct, kw_only=True):
    success: bool


async def get_synonym_value(args: GetSynonymValue, session: Session) -> SynonymValue:
    """The synonym's value: the sum of its characters' code points ("Arid" → 384)."""
    return SynonymValue(synonym_value=sum(map(ord, args.synonym)))


async def extract_synonym_values(args: ExtractSynonymValues, session: Session) -> Extracted:
    """Record the answer; the verifier reads it from the call's arguments."""
    return Extracted(success=True)


class SynonymVerifyRequest(VerifyRequest, kw_only=True):
    # Typed loosely so a wrong-typed row is reward 0 with a reason, not a rejected request.
    expected_synonym_values: Any = UNSET
    minefield_label: Any = None
    minefield_label_value: Any = None


class SynonymVerdict(VerifyResult, kw_only=True):
    parsed_synonym_values: list[int]
    accuracy: bool
    set_overlap: float
    original_term_minefield_hit: bool
    order_instruction_following_failure: bool
    error_type: str | UnsetType = UNSET


def bare_tool_name(name: str) -> str:
    """`name` without an MCP namespace (`mcp__<server>__<tool>` → `<tool>`), as NeMo Gym
    normalizes names before verifying."""
    if not name.startswith("mcp__"):
        return name
    _, sep, bare = name.removeprefix("mcp__").partition("__")
    return bare if sep else name


def whole_numbers(value: Any) -> list[int] | None:
    """`value` as a list of ints if it is a list of whole numbers (711 or 711.0), else None."""
    if not isinstance(value, list):
        return None
    numbers = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float):
            return None
        if isinstance(item, float) and not item.is_integer():
            return None
        numbers.append(int(item))
    return numbers


def last_extracted(output: list[Item]) -> list[int] | None:
    """The `synonym_values` of the last extract call; [] if there is none, None if malformed."""
    for item in reversed(output):
        if item.kind == "function_call" and bare_tool_name(str(item.name or "")) == EXTRACT:
            try:
                arguments = json.loads(str(item.arguments or ""))
            except ValueError:
                return None
            return whole_numbers(arguments.get("synonym_values") if isinstance(arguments, dict) else None)
    return []


def set_overlap(actual: list[int], expected: list[int]) -> float:
    if not expected:
        return float(not actual)
    return len(set(actual) & set(expected)) / len(expected)


def minefield_hit(actual: list[int], request: SynonymVerifyRequest) -> bool:
    # NeMo Gym checks the label (a string) too; among integers only the value can match.
    mines = (request.minefield_label, request.minefield_label_value)
    return any(mine is not None and mine in actual for mine in mines)


def verdict(actual: list[int], expected: list[int], request: SynonymVerifyRequest) -> SynonymVerdict:
    accuracy = actual == expected
    overlap = set_overlap(actual, expected)
    return SynonymVerdict(
        reward=float(accuracy),
        parsed_synonym_values=actual,
        accuracy=accuracy,
        set_overlap=overlap,
        original_term_minefield_hit=minefield_hit(actual, request),
        order_instruction_following_failure=not accuracy and overlap == 1.0,
    )


def unverifiable(actual: list[int], request: SynonymVerifyRequest, error_type: str) -> SynonymVerdict:
    return SynonymVerdict(
        reward=0.0,
        parsed_synonym_values=actual,
        accuracy=False,
        set_overlap=0.0,
        original_term_minefield_hit=minefield_hit(actual, request),
        order_instruction_following_failure=False,
        error_type=error_type,
    )


async def verify(request: SynonymVerifyRequest, session: Session) -> SynonymVerdict:
    """Reward 1.0 iff the last extracted values equal `expected_synonym_values`, in order."""
    expected = whole_numbers(request.expected_synonym_values)
    actual = last_extracted(request.response.output)
    if expected is None:
        return unverifiable(actual or [], request, "invalid_expected_synonym_values")
    if actual is None:
        return unverifiable([], request, "malformed_extract_call")
    return verdict(actual, expected, request)


ENVIRONMENT = Environment(
    name="example_multi_step",
    tools=(tool(get_synonym_value), tool(extract_synonym_values)),
    verify=verify,
    verify_request=SynonymVerifyRequest,
    agents=("example_multi_step_simple_agent",),
    description="NeMo Gym's multi-step synonym extraction: look up values, extract them in order.",
)
