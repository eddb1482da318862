"""Encoding messages: one cached decoder per type, the nesting bound, and error replies."""

from __future__ import annotations

from array import array
from functools import cache
from itertools import accumulate
from typing import Any, TypeVar, cast

import msgspec

from gymbus.schemas import (
    DEFAULT_LIMITS,
    ERROR,
    ERROR_CODE,
    BadRequest,
    ErrorInfo,
    GymError,
    WireError,
    from_wire,
)

__all__ = [
    "decode",
    "decoder",
    "encode",
    "encode_error_reply",
    "error_from_reply",
    "nested_deeper",
]

T = TypeVar("T")

encode = msgspec.json.Encoder().encode


@cache
def _cached_decoder(kind: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind)


def decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    """The shared decoder for `kind` (built once per type)."""
    return _cached_decoder(cast(Any, kind))


def decode(data: bytes, kind: type[T], what: str = "request") -> T:
    """`data` decoded as `kind`, or `BadRequest` naming the field that is wrong."""
    try:
        return decoder(kind).decode(data)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid {what}: {exc}") from None
    except RecursionError:
        raise BadRequest(f"invalid {what}: nested too deep to decode") from None


_KEEP_MARKS = bytes(range(256)).translate(None, b'[]{}"')  # translate(None, this) keeps only these
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes


def nested_deeper(data: bytes, limit: int = DEFAULT_LIMITS.max_depth) -> bool:
    """Whether the JSON `data` nests arrays and objects more than `limit` levels deep
    (brackets inside strings do not count).

    Never decodes, so it cannot recurse: a few microseconds for a message with at most
    `limit` brackets, about 3 µs per KB beyond. Malformed JSON may read either way; its
    decoder says what is wrong with it.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # In JSON a backslash always escapes the next character: drop `\\` pairs first, then
    # escaped quotes, and only string delimiters remain among the quotes.
    marks = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _KEEP_MARKS)
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])  # outside strings: every other piece
    return max(accumulate(array("b", marks.translate(_SIGNS))), default=0) > limit


def encode_error_reply(error: GymError) -> tuple[bytes, dict[str, str]]:
    """Body and headers of the error reply that stands for `error`."""
    body = encode(WireError(error=ErrorInfo(type=error.type, message=error.message)))
    # A header value must be one line.
    description = error.message.replace("\r", " ").replace("\n", " ")[:1024]
    return body, {ERROR: description, ERROR_CODE: error.code}


def error_from_reply(headers: dict[str, str] | None, data: bytes, subject: str) -> GymError | None:
    """The error an error reply carries, or `None` for a normal reply."""
    if not headers or ERROR_CODE not in headers:
        return None
    try:
        info = decoder(WireError).decode(data).error
        return from_wire(headers[ERROR_CODE], info.type, info.message, subject)
    except msgspec.DecodeError:
        return from_wire(headers[ERROR_CODE], None, headers.get(ERROR, ""), subject)
