"""Joining stored rollouts with the inputs they were made from (`gym-runner verify --inputs`).

NeMo Gym's rollout rows omit the task fields its verifiers read (`expected_answer`,
`options`, `ground_truth`, `verifier_metadata`, `schema_str`, ...): they live in the
`<stem>_materialized_inputs.jsonl` written beside the rollouts. NeMo Gym's `gym eval
reverify` pairs each rollout with the materialized input row of the same
`_ng_task_index` and `_ng_rollout_index` and sends *that input row* with the rollout's
`response` to the verifier. The join here follows the same rule:

1. By key: the input row whose `(_ng_task_index, _ng_rollout_index)` is the rollout's
   (when two input rows share a key, the later one, as NeMo Gym's dict keeps).
2. Otherwise by prompt: the input task whose `responses_create_params.input` and
   `instructions` equal the rollout's, compared as JSON with keys sorted, `null` members
   left out and a message item's default `"type": "message"` dropped (NeMo Gym writes the
   request back with every default spelled out). This joins a rollout without indices, or
   a task file without them (the dataset itself). A prompt
   shared by different tasks (different `_ng_task_index`, or different rows when there is
   none) joins nothing: the rollout is reported, not guessed.
3. Otherwise the rollout is not verified: its failure row names its file and line, and
   why (`_ng_failure_class: unmatched_input`); NeMo Gym stops the whole run there instead.

The verify request is built as NeMo Gym 0.7.0's `gym eval reverify` builds it: the input
row, the rollout's `response`, and of the rollout's other fields only those a verifier
reads from the rollout itself (`deliverables_dir`, `reference_ids`). What the server's
verify added to the stored rollout (`reward`, and extras such as iheval's `strict`,
`loose`, `prompt_strict`) is not sent back: a server that spreads its request into its
reply would be given the same keyword twice. GymBus's bookkeeping (`agent_ref`,
`_ng_task_index`, `_ng_rollout_index`) comes from the rollout where the input row has
none. The rollout's stored `reward` is kept beside the request, to compare the new one with.

The inputs file is scanned once; only the byte ranges of its rows are kept in memory, and
a row is read back when a rollout joins it. A line that is not a JSON object with
`responses_create_params` is skipped and counted (its line numbers are noted).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import msgspec
from msgspec import Struct

from gymbus.schemas import (
    AGENT_REF,
    RESPONSE,
    REWARD,
    ROLLOUT_INDEX,
    TASK_INDEX,
    InputError,
    RolloutFailed,
    row_fields,
)

__all__ = ["UNMATCHED", "InputIndex", "JoinTally"]

UNMATCHED = "unmatched_input"
"""The failure class of a rollout that no input row joins."""
NOTED_LINES = 5
"""Skipped input lines named in the tally; the count covers them all."""
_FROM_ROLLOUT = (RESPONSE, "deliverables_dir", "reference_ids")
"""The rollout's fields in the verify request, over the input row's (NeMo Gym's rule)."""
_BOOKKEEPING = (AGENT_REF, TASK_INDEX, ROLLOUT_INDEX)
"""The rollout's fields in the verify request where the input row lacks them."""


class _Keys(Struct, gc=False):
    """What the join reads of a row; loosely typed, so an odd field only means "no key"."""

    responses_create_params: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    task_index: Any = msgspec.field(default=None, name=TASK_INDEX)
    rollout_index: Any = msgspec.field(default=None, name=ROLLOUT_INDEX)
    agent_ref: Any = None


class _Prompt(Struct, gc=False):
    input: Any = None
    instructions: Any = None


_keys_decoder = msgspec.json.Decoder(_Keys)
_prompt_decoder = msgspec.json.Decoder(_Prompt)
_sorted_encoder = msgspec.json.Encoder(order="sorted")


@dataclass
class JoinTally:
    """How the rollouts of one run were joined with `inputs`."""

    inputs: Path
    input_rows: int = 0
    skipped_lines: int = 0
    noted_lines: list[int] = field(default_factory=list)
    by_key: int = 0
    by_prompt: int = 0
    unmatched: int = 0


@dataclass(frozen=True)
class _Span:
    offset: int
    length: int
    line: int


_AMBIGUOUS = _Span(-1, 0, 0)


def _keys(line: bytes) -> _Keys | None:
    try:
        return _keys_decoder.decode(line)
    except msgspec.DecodeError:
        return None


def _prompt_key(raw: msgspec.Raw) -> bytes | None:
    """A digest of a `responses_create_params`'s prompt, or `None` when there is none."""
    try:
        prompt = _prompt_decoder.decode(raw)
    except msgspec.DecodeError:
        return None
    if prompt.input is None:
        return None
    canonical = _sorted_encoder.encode(_plain([prompt.input, prompt.instructions]))
    return hashlib.blake2b(canonical, digest_size=16).digest()


def _plain(value: Any) -> Any:
    """`value` without `null` members, and message items without their default type."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if not isinstance(value, dict):
        return value
    plain = {name: _plain(member) for name, member in value.items() if member is not None}
    if plain.get("type") == "message" and "role" in plain:
        del plain["type"]
    return plain


def _key(task: Any, rollout: Any) -> tuple[int, int] | None:
    ok = isinstance(task, int) and isinstance(rollout, int)
    return (task, rollout) if ok and not isinstance(task, bool) and not isinstance(rollout, bool) else None


class InputIndex:
    """The rows of an inputs file, by `(task, rollout)` key and by prompt."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tally = JoinTally(inputs=path)
        self.agents: set[str] = set()
        self._by_key: dict[tuple[int, int], _Span] = {}
        self._by_prompt: dict[bytes, tuple[_Span, object]] = {}
        self._fd = os.open(path, os.O_RDONLY)

    @classmethod
    def build(cls, path: Path) -> InputIndex:
        """Scan `path` (blocking: run it in a thread)."""
        index = cls(path)
        try:
            index._scan()
        except BaseException:
            index.close()
            raise
        return index

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _scan(self) -> None:
        offset = 0
        with self.path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                line = raw.rstrip(b"\r\n")
                if line.strip():
                    self._add(line, _Span(offset, len(line), number))
                offset += len(raw)

    def _add(self, line: bytes, span: _Span) -> None:
        keys = _keys(line)
        prompt = _prompt_key(keys.responses_create_params) if keys is not None else None
        if keys is None or prompt is None:
            self._skip(span.line)
            return
        self.tally.input_rows += 1
        if isinstance(keys.agent_ref, dict) and isinstance(keys.agent_ref.get("name"), str):
            self.agents.add(keys.agent_ref["name"])
        key = _key(keys.task_index, keys.rollout_index)
        if key is not None:
            self._by_key[key] = span
        task = keys.task_index if isinstance(keys.task_index, int) else hashlib.blake2b(line).digest()
        known = self._by_prompt.get(prompt)
        if known is None:
            self._by_prompt[prompt] = (span, task)
        elif known[1] != task:
            self._by_prompt[prompt] = (_AMBIGUOUS, known[1])

    def _skip(self, number: int) -> None:
        self.tally.skipped_lines += 1
        if len(self.tally.noted_lines) < NOTED_LINES:
            self.tally.noted_lines.append(number)

    def join(self, line: bytes, path: str, number: int) -> tuple[bytes, msgspec.Raw | None]:
        """The verify request for the rollout `line` and its stored reward (see the module
        docstring). `InputError` for a line that is not a JSON object;
        `RolloutFailed(UNMATCHED)` when no input row joins it."""
        keys = _keys(line)
        try:
            rollout = row_fields(line)
        except msgspec.DecodeError as exc:
            raise InputError(f"not a JSON object ({exc})", path=path, line=number) from None
        span = self._match(keys or _Keys(), path, number)
        request = row_fields(os.pread(self._fd, span.length, span.offset))
        request.pop(REWARD, None)
        for name in _BOOKKEEPING:
            if name not in request and name in rollout:
                request[name] = rollout[name]
        request |= {name: rollout[name] for name in _FROM_ROLLOUT if name in rollout}
        return msgspec.json.encode(request), rollout.get(REWARD)

    def _match(self, keys: _Keys, path: str, number: int) -> _Span:
        key = _key(keys.task_index, keys.rollout_index)
        if key is not None and key in self._by_key:
            self.tally.by_key += 1
            return self._by_key[key]
        found = self._by_prompt.get(_prompt_key(keys.responses_create_params) or b"")
        if found is not None and found[0] is not _AMBIGUOUS:
            self.tally.by_prompt += 1
            return found[0]
        self.tally.unmatched += 1
        raise RolloutFailed(UNMATCHED, f"{path}:{number}: {self._why(key, found is not None)}")

    def _why(self, key: tuple[int, int] | None, ambiguous: bool) -> str:
        name = self.path.name
        if ambiguous:
            return (
                f"its prompt is that of several tasks in {name}, and no {TASK_INDEX}, {ROLLOUT_INDEX} match"
            )
        if key is None:
            return f"no row of {name} has its prompt (and it has no {TASK_INDEX} and {ROLLOUT_INDEX})"
        return f"no row of {name} has {TASK_INDEX} {key[0]} and {ROLLOUT_INDEX} {key[1]}, nor its prompt"
