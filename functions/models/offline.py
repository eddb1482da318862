"""The offline policy: a scripted stand-in for a language model, so the pipeline runs with
no API key, no weights and no network.

It is **not a language model**: it learns nothing, solves nothing and knows no dataset. It
reads only the generic parts of a request (the tools and their JSON Schemas, the format the
prompt asks for, the tool outputs so far) and is deterministic. Its script, first match wins:

1. **Simulated user** (instructions opening with the multi-turn agent's `SIMULATOR_PREAMBLE`):
   its goal (the "Your goal:" line), once; then `STOP_MARKER`.
2. **Tool call**, when tools are offered and none was called since the last user message:
   the tool whose name, description and parameter names share most words with the prompt,
   with `arguments` read from its JSON Schema and the prompt.
3. **Judge** (the conversation offers verdict labels such as `[[A=B]]` and `[[A!=B]]`): the
   first label when the prompt's two answers (`_ANSWER_PAIRS`) read the same once
   `_normalised`, else the second.
4. **Answer** from the evidence (the tool outputs since the last user message), in the
   format asked: for lettered options ("A: ...", "B) ..."), the option sharing most words
   with the evidence; for a JSON Schema in a prompt without tools, a `schema_instance`; for
   `\\boxed{}` or an `<answer>` tag, the last number of the evidence (else of the prompt's
   last paragraph), else its subject; otherwise the evidence, else the prompt's first line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from gymbus.schemas import (
    ContentPart,
    Item,
    Response,
    ResponsesCreateParams,
    Tool,
    Usage,
    input_items,
    item_text,
)

from .._spec import Model
from ..agents.multi_turn_agent import SIMULATOR_PREAMBLE, STOP_MARKER

__all__ = ["MODEL", "arguments", "offline_policy", "schema_instance"]

MODEL_NAME = "gymbus-offline-policy"

Leaf = Callable[[str, str, dict[str, Any]], Any]
"""`leaf(name, type, schema)`: a value for a string, number, integer, boolean or null property."""

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_URL = re.compile(r"https?://[^\s\"'<>)\]]+")
_QUOTED = re.compile(r"\"([^\"\n]{1,200})\"|(?<!\w)'([^'\n]{1,200})'(?!\w)")
_PROPER = re.compile(r"(?<=[a-z0-9,;:][ \t])[A-Z][a-zA-Z]+(?:[ \t]+[A-Z][a-zA-Z]+)*")
_TOKEN = re.compile(r"[\w'-]+|[^\w\s]")
_OPTION = re.compile(r"^\s*([A-Z])\s*[:.)]\s+(\S.*)$", re.MULTILINE)
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_LABEL = re.compile(r"\[\[[^\[\]\n]{1,20}\]\]")
_ANSWER_PAIRS = (  # the common layouts of a judge prompt's two answers; the last pair counts
    re.compile(r"Answer A[^\n]*:\n(.*)\n\nAnswer B[^\n]*:\n(.*)\Z", re.DOTALL),
    re.compile(r".*GOLD:\n(.*?)\n\s*CANDIDATE:\n(.*?)\s*\Z", re.DOTALL),
    re.compile(
        r".*<\|Start of Assistant A's Answer\|>(.*?)<\|End of Assistant A's Answer\|>"
        r".*?<\|Start of Assistant B's Answer\|>(.*?)<\|End of Assistant B's Answer\|>",
        re.DOTALL,
    ),
)
_GOAL = re.compile(r"^Your goal: (.*\S)", re.MULTILINE)
_PREPOSITIONS = {"in", "at", "for", "of", "about", "near", "from", "to", "on", "with", "by"}
_FREE_TEXT = {"query", "q", "question", "prompt", "text", "message", "search"}
_STOPWORDS = {
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "get", "give",
    "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "please", "that", "the", "this",
    "to", "was", "what", "whats", "when", "where", "which", "who", "why", "will", "with", "you", "your",
}  # fmt: skip
_EMPTY: dict[str, Any] = {"number": 0, "integer": 0, "boolean": False, "null": None}
_MAX_TEXT = 200  # characters of a free-text argument or a plain answer
_PHRASE_WORDS = 4  # words of a subject phrase
_MAX_DEPTH = 12  # nesting of schemas walked (a recursive `$ref` stops here)


async def offline_policy(params: ResponsesCreateParams) -> Response:
    """One scripted generation for `params` (see the module docstring)."""
    items = input_items(params)
    users = [at for at, item in enumerate(items) if item.kind == "message" and item.role == "user"]
    prompt = item_text(items[users[-1]]) if users else ""
    recent = items[users[-1] + 1 :] if users else items  # what happened since the last user message
    instructions = params.instructions if isinstance(params.instructions, str) else ""
    tools = [t for t in params.tools or [] if t.type == "function" and isinstance(t.name, str)]
    if instructions.startswith(SIMULATOR_PREAMBLE):
        output = _message(_simulated_user(instructions, items), items)
    elif tools and not any(item.kind == "function_call" for item in recent):
        words, usable = _words(prompt), [one for one in tools if _fillable(one, prompt)] or tools
        tool = max(usable, key=lambda one: len(words & _tool_words(one)))  # the first of equals
        output = _call(str(tool.name), arguments(tool.parameters, prompt), items)
    else:
        # What the request asks, wherever it says it: the instructions and every message.
        asked = "\n".join([instructions, *(item_text(i) for i in items if i.kind == "message")])
        output = _message(_judge(asked, prompt) or _answer(asked, prompt, bool(tools), recent), items)
    return _response(params, items, output)


def arguments(schema: Any, prompt: str) -> Any:
    """Arguments valid for a tool's JSON Schema (see `schema_instance`), read from `prompt`.

    A property the prompt names (`city: Paris`, `page=2`) takes that value, optional ones
    included. Otherwise numbers are the prompt's numbers in order (then 0); an enum takes the
    value the prompt mentions, else the one sharing most words with it; a boolean is false; a
    string is the first URL (for a name with "url" or "uri" in it), the first line (for a
    free-text name such as `query`), else the prompt's `_subject`."""
    numbers = iter([float(n) for n in _NUMBER.findall(prompt)])

    def leaf(name: str, kind: str, sub: dict[str, Any]) -> Any:
        named = _named(name, prompt)
        if "enum" in sub:
            return _best_enum(sub["enum"], named or prompt)
        if kind in ("number", "integer"):
            value = float(named) if named and _NUMBER.fullmatch(named) else next(numbers, 0.0)
            return int(value) if kind == "integer" else value
        if kind in _EMPTY:
            return _EMPTY[kind]
        urls = _URL.findall(prompt) if "url" in name.lower() or "uri" in name.lower() else []
        return named or (urls[0] if urls else _first_line(prompt) if name in _FREE_TEXT else _subject(prompt))

    return schema_instance(schema or {"type": "object"}, leaf, lambda name: _named(name, prompt) is not None)


def schema_instance(
    schema: Any, leaf: Leaf | None = None, wanted: Callable[[str], bool] | None = None
) -> Any:
    """A small value valid for a JSON Schema. An object gets its required properties (all of
    them when it has no `required` list) and those `wanted(name)` asks for; an array one
    item (or `minItems`); `const`, local `$ref`s and `anyOf`/`oneOf` (the first non-null
    branch) are followed. `leaf(name, type, schema)` fills the rest (by default the first
    enum value, "", 0, false or null)."""
    fill = leaf or (lambda name, kind, sub: sub["enum"][0] if sub.get("enum") else _EMPTY.get(kind, ""))
    optional = wanted or (lambda name: False)
    root = schema if isinstance(schema, dict) else {}

    def walk(sub: Any, name: str, depth: int) -> Any:
        sub = _resolve(sub, root)
        kind = _kind(sub)
        if "const" in sub:
            return sub["const"]
        if kind == "object":
            properties = (sub.get("properties") or {}) if depth < _MAX_DEPTH else {}
            required = sub.get("required")
            keep = set(required) if isinstance(required, list) else set(properties)
            return {k: walk(v, k, depth + 1) for k, v in properties.items() if k in keep or optional(k)}
        if kind == "array":
            size = max(1, sub.get("minItems", 1))
            return [walk(sub.get("items") or {}, name, depth + 1) for _ in range(size)]
        value = fill(name, kind, sub)
        if kind in ("number", "integer") and isinstance(value, int | float):  # within its bounds
            value = max(value, sub.get("minimum", value))
            value = min(value, sub.get("maximum", value))
        return value

    return walk(root, "", 0)


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """`schema` itself, the target of its local `$ref`, or its first non-null `anyOf`/`oneOf` branch."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(schema, dict):
            return {}
        if isinstance(schema.get("$ref"), str):  # "#/$defs/name" or "#/definitions/name"
            schema = (root.get("$defs") or root.get("definitions") or {}).get(schema["$ref"].split("/")[-1])
        elif isinstance(branches := schema.get("anyOf") or schema.get("oneOf"), list) and branches:
            schema = next((b for b in branches if _kind(b) != "null"), branches[0])
        else:
            return schema
    return {}


def _kind(schema: Any) -> str:
    """The schema's type: the first non-null one of a list, else guessed from its keys."""
    schema = schema if isinstance(schema, dict) else {}
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = next((one for one in declared if one != "null"), "null")
    return declared if isinstance(declared, str) else "object" if "properties" in schema else "string"


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text.replace("_", " "))} - _STOPWORDS


def _tool_words(tool: Tool) -> set[str]:
    """The words of a tool's name, its description and every property name in its schema."""
    return _words(" ".join([str(tool.name), str(tool.description or ""), *_property_names(tool.parameters)]))


def _fillable(tool: Tool, prompt: str) -> bool:
    """False for a tool that requires a URL when the prompt has none: calling it cannot work."""
    required = (tool.parameters or {}).get("required") or []
    return bool(_URL.search(prompt)) or not any("url" in str(name).lower() for name in required)


def _property_names(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = schema.get("properties")
        return [*(own if isinstance(own, dict) else ()), *_property_names(list(schema.values()))]
    return [name for sub in schema for name in _property_names(sub)] if isinstance(schema, list) else []


def _named(name: str, prompt: str) -> str | None:
    """The value the prompt gives `name` ("city: Paris", `city="Paris"`), or None."""
    found = re.search(rf"\b{re.escape(name)}\s*[:=]\s*[\"']?([^\"',\n]+)", prompt, re.IGNORECASE)
    return found.group(1).strip() if found and name else None


def _best_enum(values: list[Any], text: str) -> Any:
    lowered, words = text.lower(), _words(text)
    mentioned = [v for v in values if re.search(rf"\b{re.escape(str(v).lower())}\b", lowered)]
    return mentioned[0] if mentioned else max(values, key=lambda v: len(_words(str(v)) & words))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:_MAX_TEXT]


def _subject(text: str) -> str:
    """The first quoted text, else capitalised words past a sentence's start, else the phrase
    after the last preposition, else the last word that is not a stop word."""
    if quoted := _QUOTED.search(text):
        return quoted.group(1) or quoted.group(2)
    if proper := _PROPER.search(text):
        return proper.group(0)
    tokens = _TOKEN.findall(text)
    for start in reversed([at + 1 for at, token in enumerate(tokens) if token.lower() in _PREPOSITIONS]):
        phrase: list[str] = []
        for token in tokens[start:]:  # the phrase's words, up to a punctuation mark or a stop word
            if not token[0].isalnum() or (phrase and token.lower() in _STOPWORDS):
                break
            phrase += [] if token.lower() in _STOPWORDS else [token]
        if phrase:
            return " ".join(phrase[:_PHRASE_WORDS])
    content = [token for token in tokens if token[0].isalnum() and token.lower() not in _STOPWORDS]
    return content[-1] if content else text.strip()[:_MAX_TEXT]


def _simulated_user(instructions: str, items: list[Item]) -> str:
    goal = _GOAL.search(instructions)
    said = {item_text(i).strip() for i in items if i.kind == "message" and i.role == "assistant"}
    return goal.group(1) if goal and goal.group(1) not in said else STOP_MARKER


def _normalised(answer: str) -> str:
    """An answer's final form: its last `\\boxed{}` if it has one, unwrapped, lower case, trimmed."""
    boxes = _BOXED.findall(answer)
    text = re.sub(r"\\(?:text|mathrm|textbf)\{([^{}]*)\}", r"\1", boxes[-1] if boxes else answer)
    text = " ".join(text.replace("\\(", "").replace("\\)", "").strip().strip("$").lower().split())
    return re.sub(r"^(?:the|a|an)\s+", "", text.rstrip(".!;,"))


def _judge(asked: str, prompt: str) -> str | None:
    """A verdict when the request offers two labels or more; None when it is not a judge's."""
    labels = list(dict.fromkeys(_LABEL.findall(asked)))
    if len(labels) < 2:
        return None
    answers = next((found for pair in _ANSWER_PAIRS if (found := pair.search(prompt))), None)
    first, second = (_normalised(answers.group(1)), _normalised(answers.group(2))) if answers else ("", "")
    # The answers are not echoed: a label inside one would be read as the verdict.
    if first and first == second:
        return f"The two answers are the same once normalised. {labels[0]}"
    return f"The two answers differ. {labels[1]}"


def _answer(asked: str, prompt: str, has_tools: bool, recent: list[Item]) -> str:
    evidence = " ".join(_output_text(item) for item in recent if item.kind == "function_call_output")
    options = dict(reversed(_OPTION.findall(prompt)))  # the first option of each letter
    if len(options) >= 2 and "A" in options:
        support = _words(evidence)
        letter = max(sorted(options), key=lambda one: len(_words(options[one]) & support))  # first of equals
        return _wrapped(asked, letter)
    if not has_tools and (schema := _schema_in(prompt)) is not None:
        return json.dumps(schema_instance(schema), indent=2)
    if "\\boxed" in asked or "<answer>" in asked:
        source = evidence or prompt.rsplit("\n\n", 1)[-1]
        numbers = _NUMBER.findall(source)
        return _wrapped(asked, numbers[-1] if numbers else _subject(source))
    return evidence[:_MAX_TEXT] if evidence else _first_line(prompt)


def _wrapped(asked: str, value: str) -> str:
    if "\\boxed" in asked:
        return f"\\boxed{{{value}}}"
    return f"<answer>{value}</answer>" if "<answer>" in asked else f"Answer: {value}"


def _output_text(item: Item) -> str:
    """A tool output's text: its JSON string values joined, or the text as it is."""
    text = item.output if isinstance(item.output, str) else item_text(Item(content=item.output))
    try:
        value = json.loads(text)
    except ValueError:
        return text
    strings = [v for v in (value.values() if isinstance(value, dict) else [value]) if isinstance(v, str)]
    return " ".join(strings) or text


def _schema_in(prompt: str) -> dict[str, Any] | None:
    """The largest JSON object in `prompt` that looks like a JSON Schema, or None."""
    decoder, best, size = json.JSONDecoder(), None, 0
    for start in (m.start() for m in re.finditer(r"\{\s*\"", prompt)):
        try:
            value, end = decoder.raw_decode(prompt, start)
        except ValueError:
            continue
        if isinstance(value, dict) and ("properties" in value or "items" in value) and end - start > size:
            best, size = value, end - start
    return best


def _digest(items: list[Item], salt: str) -> str:
    """An id part that the conversation and `salt` determine: the same request, the same ids."""
    return hashlib.blake2b(msgspec.json.encode(items) + salt.encode(), digest_size=8).hexdigest()


def _call(name: str, args: Any, items: list[Item]) -> Item:
    encoded = json.dumps(args)
    digest = _digest(items, encoded)
    return Item(
        type="function_call", id=f"fc_{digest}", status="completed", name=name, arguments=encoded,
        call_id=f"call_{digest}",
    )  # fmt: skip


def _message(text: str, items: list[Item]) -> Item:
    return Item(
        type="message", id=f"msg_{_digest(items, text)}", role="assistant", status="completed",
        content=[ContentPart(type="output_text", text=text, annotations=[], logprobs=None)],
    )  # fmt: skip


def _word_count(item: Item) -> int:
    text = item_text(item) if item.kind == "message" else str(item.arguments or item.output or "")
    return len(text.split())


def _response(params: ResponsesCreateParams, items: list[Item], output: Item) -> Response:
    """The response, its usage counted in words (a stand-in for tokens)."""
    inputs, outputs = sum(map(_word_count, items)), _word_count(output)
    return Response(
        id=f"resp_{_digest(items, 'response')}",
        created_at=0.0,
        model=params.model if isinstance(params.model, str) else MODEL_NAME,
        output=[output],
        status="completed",
        usage=Usage(input_tokens=inputs, output_tokens=outputs, total_tokens=inputs + outputs),
    )


MODEL = Model(
    name="offline",
    make=lambda options: offline_policy,
    description="Scripted offline policy (not a language model): calls a fitting tool, then answers.",
)
