"""The wire structs: NeMo Gym rows decode, items round-trip, exported schemas are current."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gymbus import schemas
from gymbus.schemas import Item, ResponsesCreateParams, TaskRow, merge_row, output_text, row_fields

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_exported_schemas_are_current() -> None:
    """Fails when a struct changed but `python -m gymbus.schemas` was not run."""
    for name, text in schemas.exported_schemas().items():
        path = schemas.SCHEMA_DIR / name
        assert path.exists(), f"{name} missing: run `python -m gymbus.schemas`"
        assert path.read_bytes() == text, f"{name} is stale: run `python -m gymbus.schemas`"


def test_every_example_row_decodes_as_a_task_row() -> None:
    rows = [
        line for path in EXAMPLES.glob("*.jsonl") for line in path.read_bytes().splitlines() if line.strip()
    ]
    assert rows
    for line in rows:
        task = msgspec.json.decode(line, type=TaskRow)
        assert task.responses_create_params.input


def test_unknown_key_in_responses_create_params_is_rejected_like_nemo_gym() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `temprature`"):
        msgspec.json.decode(b'{"input": "hi", "temprature": 0.5}', type=ResponsesCreateParams)


NEWER_NEMO_GYM_ROW = {
    "responses_create_params": {
        "input": [{"role": "user", "content": "What is 2 + 2?"}],
        "context_management": [{"type": "compaction", "compact_threshold": 200000}],
        "conversation": {"id": "conv_123"},
        "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}},
        "prompt_cache_key": "math-v1",
        "prompt_cache_retention": "in_memory",
        "safety_identifier": "user-5f2c",
        "stream_options": {"include_obfuscation": False},
        "temperature": 1.0,
    },
    "expected_answer": "4",
    "agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"},
}


def test_a_row_with_newer_nemo_gym_request_options_decodes_and_reencodes_unchanged() -> None:
    raw = msgspec.json.encode(NEWER_NEMO_GYM_ROW)
    task = msgspec.json.decode(raw, type=TaskRow)
    params = task.responses_create_params
    assert params.prompt_cache_key == "math-v1" and params.conversation == {"id": "conv_123"}
    assert msgspec.json.decode(msgspec.json.encode(params)) == NEWER_NEMO_GYM_ROW["responses_create_params"]


def test_a_row_with_newer_nemo_gym_request_options_matches_the_exported_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = msgspec.json.decode((schemas.SCHEMA_DIR / "task_row.schema.json").read_bytes())
    jsonschema.validate(NEWER_NEMO_GYM_ROW, schema)
    bad = {"responses_create_params": {"input": "hi", "prompt_cache_key": 7}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_items_reencode_with_the_keys_they_came_with() -> None:
    raw = b'{"content":"hi","role":"user"}'
    item = msgspec.json.decode(raw, type=Item)
    assert item.kind == "message"
    assert msgspec.json.decode(msgspec.json.encode(item)) == msgspec.json.decode(raw)


def test_function_call_arguments_stay_a_string() -> None:
    raw = b'{"type":"function_call","name":"f","arguments":"{\\"a\\": 1}","call_id":"c1"}'
    item = msgspec.json.decode(raw, type=Item)
    assert item.arguments == '{"a": 1}'
    assert msgspec.json.encode(item) == raw


def test_output_text_joins_assistant_text_parts_only() -> None:
    response = msgspec.json.decode(
        b'{"id":"r","created_at":1,"model":"m","output":['
        b'{"type":"reasoning","summary":[{"type":"summary_text","text":"hmm"}]},'
        b'{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A"},'
        b'{"type":"output_text","text":"B"}]}]}',
        type=schemas.Response,
    )
    assert output_text(response) == "AB"


def test_merge_row_keeps_untouched_fields_byte_for_byte() -> None:
    row = b'{"expected_answer": "B", "x": {"nested": [1, 2.50]}, "responses_create_params": {"input": "q"}}'
    merged = merge_row(row, b'{"reward": 1.0}', extra=2)
    fields = row_fields(merged)
    assert bytes(fields["x"]) == b'{"nested": [1, 2.50]}'
    assert msgspec.json.decode(merged)["reward"] == 1.0
    assert msgspec.json.decode(merged)["extra"] == 2
