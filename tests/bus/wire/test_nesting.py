"""The nesting bound: found without decoding, so a 100,000-deep message cannot crash a handler."""

from __future__ import annotations

import json
import time

import pytest

from gymbus.bus import nested_deeper
from gymbus.bus.wire import decode
from gymbus.schemas import DEFAULT_LIMITS, BadRequest

LIMIT = DEFAULT_LIMITS.max_depth


def nested(levels: int, inner: str = "1") -> bytes:
    return ('{"a": ' + "[" * (levels - 1) + inner + "]" * (levels - 1) + "}").encode()


def test_the_limit_counts_levels_of_arrays_and_objects() -> None:
    assert not nested_deeper(nested(LIMIT))
    assert nested_deeper(nested(LIMIT + 1))
    assert json.loads(nested(LIMIT))  # the bound is about valid JSON, as deep as allowed


@pytest.mark.parametrize(
    "text",
    [
        '{"s": "' + "[" * 500 + '"}',  # brackets in a string are text
        '{"s": "\\"' + "{" * 500 + '"}',  # ... after an escaped quote too
        '{"s": "\\\\", "t": "' + "[" * 500 + '"}',  # an escaped backslash ends no string
    ],
)
def test_brackets_inside_strings_do_not_count(text: str) -> None:
    assert json.loads(text)
    assert not nested_deeper(text.encode())


def test_an_escaped_backslash_before_a_quote_ends_the_string() -> None:
    text = '["\\\\", ' + "[" * LIMIT + "]" * LIMIT + "]"
    assert json.loads(text)
    assert nested_deeper(text.encode())


def test_a_hundred_thousand_levels_are_refused_fast_and_without_recursion() -> None:
    poison = b"[" * 100_000 + b"]" * 100_000
    started = time.perf_counter()
    assert nested_deeper(poison)
    assert time.perf_counter() - started < 1.0  # linear, no decoding


def test_decoding_something_too_deep_is_a_bad_request_not_a_recursion_error() -> None:
    with pytest.raises(BadRequest, match="nested too deep"):
        decode(b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", dict)
