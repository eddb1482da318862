"""What `gym-runner check` expects of an environment: its tools with their argument schemas,
and a sample task row to seed and verify with.

A built-in environment declares its tools (their argument structs give the JSON Schemas)
and its seed and verify request structs, from which a sample row is built when none is
given. Any other environment, served on the bus by whatever process, is known by the task
rows it is meant for: the tools a row offers the model (`responses_create_params.tools`),
and the tool subjects its service lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from gymbus.functions import Environment
from gymbus.functions.models.offline import arguments, schema_instance
from gymbus.schemas import RESPONSE, RESPONSES_CREATE_PARAMS

__all__ = ["EnvironmentContract", "sample_response"]

_SAMPLE_PROMPT = "Hello! What can you do?"


@dataclass(frozen=True)
class EnvironmentContract:
    """An environment's declared tools (name → JSON Schema of its arguments, `None` when
    unknown) and a sample task row."""

    name: str
    tools: dict[str, dict[str, Any] | None]
    row: dict[str, Any]
    offered: tuple[str, ...] = ()
    """The tools the sample row offers the model."""
    declared: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The JSON Schema of each declared tool's arguments, from its struct (none for an
    environment only the bus knows)."""

    @classmethod
    def of(cls, env: Environment, row: dict[str, Any] | None = None) -> EnvironmentContract:
        """A built-in environment's contract; `row` (else one built from its schemas) as the
        sample. A tool the row offers with a schema is called as that schema says: it is
        what the model sees."""
        sample = row if row is not None else _sample_row(env)
        offered = _offered(sample)
        declared = {tool.name: _inlined(msgspec.json.schema(tool.args_type)) for tool in env.tools}
        tools: dict[str, dict[str, Any] | None] = {
            name: offered.get(name) or schema for name, schema in declared.items()
        }
        return cls(env.name, tools, sample, tuple(offered), declared)

    @classmethod
    def from_row(cls, name: str, row: dict[str, Any] | None) -> EnvironmentContract:
        """The contract of an environment only the bus knows: the tools `row` offers the model."""
        sample = row if row is not None else {RESPONSES_CREATE_PARAMS: {"input": _SAMPLE_PROMPT}}
        tools = _offered(sample)
        return cls(name, tools, sample, tuple(tools))

    def mismatches(self, tool: str) -> list[str] | None:
        """How the schema the sample row offers the model for `tool` differs from the tool's
        arguments struct: fields the model is offered that the tool does not take, fields it
        requires that are not offered, and types it would refuse. `None` when there is
        nothing to compare (the row offers no schema, or the tool's is unknown)."""
        offered, declared = self.tools.get(tool), self.declared.get(tool)
        if offered is None or declared is None or offered is declared:
            return None
        wants, gets = declared.get("properties") or {}, offered.get("properties") or {}
        found = [
            f"`{name}` is offered, but the tool takes no such field" for name in gets if name not in wants
        ]
        found += [
            f"`{name}` is required by the tool, but not offered"
            for name in declared.get("required") or []
            if name not in gets
        ]
        for name in sorted(set(wants) & set(gets)):
            want, get = _types(wants[name]), _types(gets[name])
            if want and get and not get <= want | ({"integer"} if "number" in want else set()):
                found.append(f"`{name}` is offered as {_listed(get)}, but the tool takes {_listed(want)}")
        return found

    def arguments(self, tool: str) -> Any:
        """Arguments for `tool` valid for its schema, filled from the sample row's prompt as
        the offline policy fills them; `{}` when its schema is unknown."""
        schema = self.tools.get(tool)
        return {} if schema is None else arguments(schema, _prompt(self.row))


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A struct's schema with its top-level `$ref` resolved (its `$defs` kept)."""
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    defs = schema.get("$defs") or {}
    return {**defs.get(ref.rsplit("/", 1)[-1], {}), "$defs": defs}


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema allows (`anyOf` unrolled); empty when it says none."""
    if isinstance(schema.get("anyOf"), list):
        return {kind for option in schema["anyOf"] if isinstance(option, dict) for kind in _types(option)}
    kind = schema.get("type")
    return (
        {kind}
        if isinstance(kind, str)
        else {k for k in kind if isinstance(k, str)}
        if isinstance(kind, list)
        else set()
    )


def _listed(types: set[str]) -> str:
    return " or ".join(sorted(types))


def _sample_row(env: Environment) -> dict[str, Any]:
    """A row valid for the environment's seed and verify requests: the fields they require,
    with the first enum value, "", 0 or false, and a short prompt."""
    row: dict[str, Any] = {}
    for kind in (env.seed_request, env.verify_request):
        built = schema_instance(msgspec.json.schema(kind))
        row.update(built if isinstance(built, dict) else {})
    row.pop(RESPONSE, None)
    row[RESPONSES_CREATE_PARAMS] = {"input": _SAMPLE_PROMPT}
    return row


def _offered(row: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """The function tools a row offers the model: name → parameters schema (`None` if none)."""
    params = row.get(RESPONSES_CREATE_PARAMS) or {}
    return {
        str(tool["name"]): tool.get("parameters") if isinstance(tool.get("parameters"), dict) else None
        for tool in params.get("tools") or []
        if isinstance(tool, dict) and tool.get("type", "function") == "function" and tool.get("name")
    }


def _prompt(row: dict[str, Any]) -> str:
    """The text of the row's input: its string, or its messages' text."""
    value = (row.get(RESPONSES_CREATE_PARAMS) or {}).get("input")
    if isinstance(value, str):
        return value
    texts = []
    for item in value if isinstance(value, list) else []:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "\n".join(texts)


def sample_response(created_at: float) -> dict[str, Any]:
    """A short assistant answer, as the `response` of a verify request."""
    message = {"type": "message", "role": "assistant", "id": "msg_check", "status": "completed",
               "content": [{"type": "output_text", "text": "42", "annotations": []}]}  # fmt: skip
    return {"id": "resp_check", "object": "response", "created_at": created_at, "model": "gym-runner-check",
            "output": [message], "status": "completed"}  # fmt: skip
