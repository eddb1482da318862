"""`structured_outputs`: does the answer follow the row's JSON Schema? NeMo Gym's rules.

Two response modes (`response_mode`):

- `tool_call`: exactly one `function_call` in the output, named `tool_name` when the row
  sets it; its JSON arguments, or their `tool_payload_key` member, are the answer;
- anything else (`text`, the default): all assistant `output_text` joined, parsed as
  `schema_type` (`json`, `yaml`, `xml`, `toml`, `csv`), XML (with the `xml_coerce_types`
  setting, on by default) and CSV leaves coerced to the schema's types.

The answer is validated against `schema_str` made strict (every object's properties all
required, no others, through nested objects but not into `oneOf`/`anyOf`/`allOf` lists)
with `openapi-schema-validator`'s OpenAPI 3.1 validator, as NeMo Gym does. Reward 1.0 if
valid, else 0.0 with `error_type`: `empty_response`, `parse_error`, `validation_error`,
`api_error` (the response carries an error), `missing_tool_call`, `multiple_tool_calls`,
`wrong_tool_name`, `tool_arguments_parse_error`, `missing_tool_payload_key`,
`schema_error`, or for a row NeMo Gym would refuse `missing_field` or
`unsupported_schema_type`; `error_message` says more.

Tool calls here are the answer, not actions: the environment's agents do not execute
them (NeMo Gym's `execute_tool_calls: false`), so each rollout is one model call.

Settings (`GYMBUS_STRUCTURED_OUTPUTS`, see `_settings`): `xml_coerce_types` (true), NeMo
Gym's name and default.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import UNSET, Struct

from gymbus.schemas import VerifyRequest, VerifyResult, function_calls, output_text

from .._spec import Environment, Session
from ._settings import settings
from ._structured_formats import SCHEMA_TYPES, coerce_csv, coerce_xml, parse_structured, strictify

__all__ = ["ENVIRONMENT"]

NAME = "structured_outputs"
_MESSAGE_LIMIT = 200


class StructuredOutputsSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    xml_coerce_types: bool = True
    """Convert XML leaves to the schema's types before validating (XML carries only text)."""


class StructuredOutputsVerifyRequest(VerifyRequest, kw_only=True):
    schema_str: Any = None
    schema_type: Any = "json"
    response_mode: Any = "text"
    tool_name: Any = None
    tool_payload_key: Any = None


class StructuredOutputsResult(VerifyResult, kw_only=True):
    error_type: str | None = None
    error_message: str | None = None


class _Failure(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:_MESSAGE_LIMIT]}"


def _schema_str(request: StructuredOutputsVerifyRequest) -> str:
    if not isinstance(request.schema_str, str):
        raise _Failure("missing_field", "the row has no schema_str (a JSON Schema as a string)")
    return request.schema_str


def _strict_schema(schema_str: str) -> Any:
    try:
        return strictify(json.loads(schema_str))
    except ValueError as exc:
        raise _Failure("schema_error", str(exc)[:_MESSAGE_LIMIT]) from None


def _schema_type(request: StructuredOutputsVerifyRequest) -> str:
    schema_type = str(request.schema_type or "json").lower()
    if schema_type not in SCHEMA_TYPES:
        raise _Failure("unsupported_schema_type", f"schema_type must be one of {SCHEMA_TYPES}")
    return schema_type


def _text_verdict(request: StructuredOutputsVerifyRequest) -> None:
    """Raises `_Failure` unless the assistant text parses and validates."""
    schema_type = _schema_type(request)
    schema_str = _schema_str(request)
    text = output_text(request.response)
    if not text.strip():
        raise _Failure("empty_response", "No assistant response text")
    schema = _strict_schema(schema_str)
    try:
        answer = parse_structured(text, schema_type)
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises, the text is not a document
        raise _Failure("parse_error", _brief(exc)) from None
    coerce_types = settings(StructuredOutputsSettings, NAME).xml_coerce_types
    try:
        if schema_type == "xml" and coerce_types:
            answer = coerce_xml(answer, schema)
        if schema_type == "csv":
            answer = coerce_csv(answer, schema)
        _validate(answer, schema)
    except _Failure:
        raise
    except Exception as exc:  # noqa: BLE001 - a schema the coercion cannot walk fails validation
        raise _Failure("validation_error", _brief(exc)) from None


def _tool_payload(request: StructuredOutputsVerifyRequest) -> Any:
    if request.response.error is not None and request.response.error is not UNSET:
        raise _Failure("api_error", str(request.response.error)[:_MESSAGE_LIMIT])
    calls = function_calls(request.response.output)
    names = ", ".join(str(call.name) for call in calls)
    if not calls:
        raise _Failure("missing_tool_call", "No function_call item found in assistant response")
    if len(calls) > 1:
        raise _Failure("multiple_tool_calls", f"Expected exactly one function_call, got: {names}")
    if request.tool_name and calls[0].name != request.tool_name:
        raise _Failure("wrong_tool_name", f"Expected tool {request.tool_name!r}, got: {names}")
    try:
        arguments = json.loads(str(calls[0].arguments or ""))
    except ValueError as exc:
        raise _Failure("tool_arguments_parse_error", _brief(exc)) from None
    key = request.tool_payload_key
    if key:
        if not isinstance(arguments, dict) or key not in arguments:
            raise _Failure("missing_tool_payload_key", f"Missing tool payload key: {key}")
        return arguments[key]
    return arguments


def _tool_verdict(request: StructuredOutputsVerifyRequest) -> None:
    """Raises `_Failure` unless the one tool call's payload validates."""
    payload = _tool_payload(request)
    _validate(payload, _strict_schema(_schema_str(request)))


def _validate(answer: Any, schema: Any) -> None:
    # The validator (jsonschema and its dependencies) is imported on the first answer it checks.
    from openapi_schema_validator import OAS31Validator, validate

    try:
        validate(answer, schema, cls=OAS31Validator)
    except Exception as exc:  # noqa: BLE001  (ValidationError, SchemaError, or a value it cannot handle)
        raise _Failure("validation_error", _brief(exc)) from None


async def verify(request: StructuredOutputsVerifyRequest, session: Session) -> StructuredOutputsResult:
    """Reward 1.0 if the answer parses and validates against the strict schema."""
    try:
        if request.response_mode == "tool_call":
            _tool_verdict(request)
        else:
            _text_verdict(request)
    except _Failure as failure:
        return StructuredOutputsResult(reward=0.0, error_type=failure.error_type, error_message=str(failure))
    return StructuredOutputsResult(reward=1.0)


ENVIRONMENT = Environment(
    name=NAME,
    settings=StructuredOutputsSettings,
    verify=verify,
    verify_request=StructuredOutputsVerifyRequest,
    agents=(
        "structured_outputs_simple_agent",
        "structured_outputs_v3_simple_agent",
        "structured_outputs_v4_simple_agent",
        "structured_outputs_all_formats_simple_agent",
    ),
    agent_kind="single_call_agent",
    description="JSON Schema adherence of text (json/yaml/xml/toml/csv) or of one tool call (NeMo Gym's rules).",
)
