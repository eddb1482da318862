"""`structured_outputs`'s reward rule: the five text formats, the tool-call mode, the
strict schema, and every `error_type` (cases after NeMo Gym's own tests)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import xmltodict
import yaml

from gymbus.functions import Session
from gymbus.functions.environments._structured_formats import strictify
from gymbus.functions.registry import ENVIRONMENTS
from tests.functions.text_verifier_rows import call, example_rows, message, verify

ENV = "structured_outputs"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "settings": {"type": "object", "properties": {"debug": {"type": "boolean"}}},
    },
}
GOOD: dict[str, Any] = {
    "name": "Alice",
    "age": 30,
    "score": 95.5,
    "active": True,
    "tags": ["a", "b"],
    "settings": {"debug": False},
}
TOML = (
    'name = "Alice"\nage = 30\nscore = 95.5\nactive = true\ntags = ["a", "b"]\n\n[settings]\ndebug = false\n'
)


def text_row(schema_type: str, schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    return {"schema_str": json.dumps(schema), "schema_type": schema_type}


def tool_row(**fields: Any) -> dict[str, Any]:
    return {"schema_str": json.dumps(SCHEMA), "response_mode": "tool_call", "tool_name": "extract", **fields}


def render(value: dict[str, Any], schema_type: str) -> str:
    if schema_type == "json":
        return json.dumps(value)
    if schema_type == "yaml":
        return str(yaml.safe_dump(value))
    return str(xmltodict.unparse({"root": value}))


def variants(value: dict[str, Any]) -> list[dict[str, Any]]:
    missing = {k: v for k, v in value.items() if k != "name"}
    extra = {**value, "extra": "x"}
    wrong = {**value, "age": "thirty"}
    nested = {**value, "settings": {"debug": False, "verbose": True}}
    return [missing, extra, wrong, nested]


@pytest.mark.parametrize("schema_type", ["json", "yaml"])
async def test_json_and_yaml_valid_and_invalid(schema_type: str) -> None:
    assert await verify(ENV, text_row(schema_type), message(render(GOOD, schema_type))) == {
        "reward": 1.0,
        "error_type": None,
        "error_message": None,
    }
    for bad in variants(GOOD):
        result = await verify(ENV, text_row(schema_type), message(render(bad, schema_type)))
        assert (result["reward"], result["error_type"]) == (0.0, "validation_error"), bad


async def test_xml_leaves_are_coerced_to_the_schema_types() -> None:
    schema = {"type": "object", "properties": {"root": SCHEMA}}
    assert (await verify(ENV, text_row("xml", schema), message(render(GOOD, "xml"))))["reward"] == 1.0
    for bad in variants(GOOD):
        result = await verify(ENV, text_row("xml", schema), message(render(bad, "xml")))
        assert result["error_type"] == "validation_error", bad


async def test_xml_coerces_only_the_schemas_own_type_as_nemo_gym_does() -> None:
    schema = {
        "type": "object",
        "properties": {
            "root": {
                "type": "object",
                "properties": {
                    "id": {"$ref": "#/$defs/id"},
                    "n": {"type": ["integer", "null"]},
                    "tags": {"type": "array", "items": {"type": "integer"}},
                    "note": {"type": "string"},
                },
            }
        },
        "$defs": {"id": {"type": "integer"}},
    }
    row = text_row("xml", schema)
    plain = {**schema, "properties": {"root": {**schema["properties"]["root"], "properties": {
        "id": {"type": "integer"}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "integer"}}, "note": {"type": "string"}}}}}  # fmt: skip
    document = "<root><id>42</id><n>7</n><tags>3</tags><note/></root>"
    # A single <tags> at an array position is a one-item list; an empty string element is "".
    assert (await verify(ENV, text_row("xml", plain), message(document)))["reward"] == 1.0
    # A $ref or a union type is not followed: "42" and "7" stay strings and fail.
    assert (await verify(ENV, row, message(document)))["error_type"] == "validation_error"


async def test_xml_coercion_follows_the_xml_coerce_types_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {"type": "object", "properties": {"root": SCHEMA}}
    monkeypatch.setenv("GYMBUS_STRUCTURED_OUTPUTS", '{"xml_coerce_types": false}')
    result = await verify(ENV, text_row("xml", schema), message(render(GOOD, "xml")))
    assert (result["reward"], result["error_type"]) == (0.0, "validation_error")  # "30" is not an integer
    monkeypatch.setenv("GYMBUS_STRUCTURED_OUTPUTS", '{"xml_coerce_types": true}')
    assert (await verify(ENV, text_row("xml", schema), message(render(GOOD, "xml"))))["reward"] == 1.0


async def test_toml() -> None:
    assert (await verify(ENV, text_row("toml"), message(TOML)))["reward"] == 1.0
    extra = await verify(ENV, text_row("toml"), message(TOML + 'verbose = "no"\n'))  # lands in [settings]
    assert extra["error_type"] == "validation_error"
    assert (await verify(ENV, text_row("toml"), message('name = "x\n[bad')))["error_type"] == "parse_error"


async def test_csv_rows_are_coerced_and_checked() -> None:
    schema = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": ["integer", "null"]}},
        },
    }
    row = text_row("csv", schema)
    assert (await verify(ENV, row, message("name,age\nAlice,30\nBob,\n")))["reward"] == 1.0
    for bad in ("age\n30\n", "name,age,bonus\nA,1,x\n", "name,age\nAlice,thirty\n"):
        assert (await verify(ENV, row, message(bad)))["error_type"] == "validation_error", bad


@pytest.mark.parametrize(
    ("schema_type", "text"),
    [
        ("json", '{"name": '),
        ("yaml", "key: value\n  bad: oops\n nope"),
        ("xml", "<root><a>1</a>"),
        ("toml", "= 1"),
    ],
)
async def test_unparseable_text_is_a_parse_error(schema_type: str, text: str) -> None:
    result = await verify(ENV, text_row(schema_type), message(text))
    assert (result["reward"], result["error_type"]) == (0.0, "parse_error")
    assert result["error_message"]


async def test_all_assistant_text_is_joined_and_empty_text_is_empty_response() -> None:
    half = json.dumps(GOOD)
    assert (await verify(ENV, text_row("json"), message(half[:10]), message(half[10:])))["reward"] == 1.0
    for output in ([message("   ")], [], [call("extract", GOOD)]):
        assert (await verify(ENV, text_row("json"), *output))["error_type"] == "empty_response"


async def test_strictify_walks_nested_objects_but_not_schema_lists() -> None:
    # NeMo Gym strictifies objects it reaches through objects only: `oneOf`/`anyOf`/`allOf`
    # branches are lists, so they keep their own `required` and `additionalProperties`.
    branches = [
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"type": "object", "properties": {"b": {"type": "integer"}}},
    ]
    any_of = text_row("json", {"type": "object", "properties": {"x": {"anyOf": branches}}})
    assert (await verify(ENV, any_of, message('{"x": {"a": "s", "z": 1}}')))["reward"] == 1.0
    assert (await verify(ENV, any_of, message('{"x": {}}')))["reward"] == 1.0
    assert (await verify(ENV, any_of, message("{}")))["reward"] == 0.0  # the outer object is strict
    one_of = text_row("json", {"type": "object", "properties": {"x": {"oneOf": branches}}})
    assert (await verify(ENV, one_of, message('{"x": {}}')))["reward"] == 0.0  # both branches match
    nested = text_row(
        "json", {"type": "object", "properties": {"x": {"type": "array", "items": branches[0]}}}
    )
    assert (await verify(ENV, nested, message('{"x": [{"a": "s", "z": 1}]}')))["reward"] == 0.0


def test_strictify_leaves_the_row_schema_untouched() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    strict = strictify(schema)
    assert strict == {**schema, "required": ["a"], "additionalProperties": False}
    assert "required" not in schema


async def test_tool_call_direct_and_wrapped_payloads() -> None:
    assert (await verify(ENV, tool_row(), call("extract", GOOD)))["reward"] == 1.0
    wrapped = await verify(
        ENV, tool_row(tool_payload_key="extraction"), call("extract", {"extraction": GOOD})
    )
    assert wrapped["reward"] == 1.0
    unnamed = await verify(ENV, tool_row(tool_name=None), call("anything", GOOD))
    assert unnamed["reward"] == 1.0


@pytest.mark.parametrize(
    ("fields", "output", "error_type"),
    [
        ({}, [message("I cannot.")], "missing_tool_call"),
        ({}, [call("extract", GOOD), call("other", GOOD)], "multiple_tool_calls"),
        ({}, [call("distractor", GOOD)], "wrong_tool_name"),
        ({}, [call("extract", '{"name":')], "tool_arguments_parse_error"),
        ({}, [call("extract", "[1, 2]")], "validation_error"),  # valid JSON, checked against the schema
        ({"tool_payload_key": "extraction"}, [call("extract", "[1, 2]")], "missing_tool_payload_key"),
        ({"tool_payload_key": "extraction"}, [call("extract", {"result": GOOD})], "missing_tool_payload_key"),
        ({}, [call("extract", {**GOOD, "age": "thirty"})], "validation_error"),
        ({}, [call("extract", {k: v for k, v in GOOD.items() if k != "tags"})], "validation_error"),
    ],
)
async def test_tool_call_errors(
    fields: dict[str, Any], output: list[dict[str, Any]], error_type: str
) -> None:
    result = await verify(ENV, tool_row(**fields), *output)
    assert (result["reward"], result["error_type"]) == (0.0, error_type)
    assert result["error_message"]


@pytest.mark.parametrize(
    ("row", "error_type"),
    [
        ({"schema_type": "json"}, "missing_field"),
        ({"schema_str": 5}, "missing_field"),
        ({"schema_str": "{not json"}, "schema_error"),
        ({"schema_str": "[1]"}, "validation_error"),  # JSON, but not a schema
        ({"schema_str": json.dumps(SCHEMA), "schema_type": "ini"}, "unsupported_schema_type"),
        ({"schema_str": json.dumps({"type": "banana"})}, "validation_error"),
    ],
)
async def test_bad_rows_earn_zero_with_a_reason(row: dict[str, Any], error_type: str) -> None:
    result = await verify(ENV, row, message(json.dumps(GOOD)))
    assert (result["reward"], result["error_type"]) == (0.0, error_type)


async def test_any_response_mode_but_tool_call_is_text() -> None:
    row = {**text_row("json"), "response_mode": "voice"}
    assert (await verify(ENV, row, message(json.dumps(GOOD))))["reward"] == 1.0


async def test_a_tool_call_response_with_an_error_is_an_api_error() -> None:
    body = {**tool_row(), "responses_create_params": {"input": "task"}}
    body["response"] = {
        "id": "r", "created_at": 0, "model": "m", "output": [call("extract", GOOD)],
        "error": {"code": "server_error", "message": "boom"},
    }  # fmt: skip
    request = msgspec.convert(body, ENVIRONMENTS[ENV].verify_request)
    result = await ENVIRONMENTS[ENV].verify(request, Session(id="s"))
    assert (result.reward, getattr(result, "error_type", None)) == (0.0, "api_error")


async def test_example_rows_reward_the_right_tool_with_schema_shaped_arguments() -> None:
    for row in example_rows(ENV):
        schema = json.loads(row["schema_str"])
        payload = _instance(schema)
        arguments = {row["tool_payload_key"]: payload} if row.get("tool_payload_key") else payload
        assert (await verify(ENV, row, call(row["tool_name"], arguments)))["reward"] == 1.0
        wrong = await verify(ENV, row, call("not_" + row["tool_name"], arguments))
        assert wrong["error_type"] == "wrong_tool_name"


def _instance(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    kind = next(t for t in kind if t != "null") if isinstance(kind, list) else kind
    if kind == "object":
        return {key: _instance(sub) for key, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [_instance(schema["items"])]
    return {"string": "s", "integer": 1, "number": 1.5, "boolean": False}[kind]
