"""`instruction_following`: IFEval / IFBench-style verifiable instructions, NeMo Gym's rules.

No tools. The text checked is the **last output item's first content part** (as NeMo
Gym reads it), against each `instruction_id_list[i]` with `kwargs[i]`. Reward:

- `grading_mode: "binary"` (default): 1.0 if every instruction is followed, else 0.0;
- `grading_mode: "fraction"`: the fraction of instructions followed.

The row fields sit under `verifier_metadata` (`instruction_id_list`, `prompt`, `kwargs`,
`grading_mode`) or, in older rows, at the top level; as in NeMo Gym, each field missing from
`verifier_metadata` is taken from the top level. The result adds
`follow_all_instructions` and `follow_instruction_list`.

Supported ids: IFEval's 25 and the 29 IFBench training constraints (the 54 of NeMo Gym's
registry), implemented in `_ifeval_checks` and `_ifbench_train_checks`. An unknown id,
or kwargs an instruction cannot use, counts as not followed and is named in
`error_message`. Where this differs from NeMo Gym, it is on purpose and bounded:
an empty response, an empty instruction list, lists of different lengths or an unknown
`grading_mode` give reward 0 with an `error_type` instead of a server error or a
reward for text never checked; a missing kwarg is "not followed" instead of a random
default.

The checks are Python (NLTK's tokenizers, langdetect, regular expressions over the whole
response), a long response takes a while, so the environment is `cpu_bound`: its calls run
in threads, off the worker's event loop (not in child processes: a check is cheaper than
starting one). A worker loads NLTK and langdetect at start-up.
"""

from __future__ import annotations

from typing import Any

from gymbus.schemas import Item, VerifyRequest, VerifyResult

from .._spec import Environment, Session
from . import _ifbench_train_checks, _ifeval_checks  # noqa: F401  (they fill the registry)
from ._ifeval_checks import load_libraries
from ._instruction_registry import REGISTRY, check_instruction

__all__ = ["ENVIRONMENT", "SUPPORTED_INSTRUCTIONS", "last_item_text"]

GRADING_MODES = ("binary", "fraction")
SUPPORTED_INSTRUCTIONS: frozenset[str] = frozenset(REGISTRY)
"""Every instruction id this environment can check."""


class InstructionFollowingVerifyRequest(VerifyRequest, kw_only=True):
    """Row fields are loosely typed on purpose: a malformed row earns reward 0 with a
    reason, rather than a decode error."""

    verifier_metadata: Any = None
    instruction_id_list: Any = None
    prompt: Any = None
    kwargs: Any = None
    grading_mode: Any = None


class InstructionFollowingResult(VerifyResult, kw_only=True, omit_defaults=True):
    follow_all_instructions: bool
    follow_instruction_list: list[bool]
    error_type: str | None = None
    error_message: str | None = None


class _RowError(ValueError):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def last_item_text(output: list[Item]) -> str:
    """The text of the last output item's first content part ("" when it has none)."""
    if not output:
        return ""
    content = output[-1].content
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0].text, str):
        return content[0].text
    return ""


def _fields(request: InstructionFollowingVerifyRequest) -> dict[str, Any]:
    """`verifier_metadata`, each field it lacks taken from the row's top level."""
    fields = dict(request.verifier_metadata) if isinstance(request.verifier_metadata, dict) else {}
    legacy = {
        "instruction_id_list": request.instruction_id_list,
        "kwargs": request.kwargs,
        "grading_mode": request.grading_mode,
    }
    for name, value in legacy.items():
        if name not in fields and value is not None:
            fields[name] = value
    return fields


def _instructions(fields: dict[str, Any]) -> tuple[list[Any], list[Any], str]:
    ids, kwargs = fields.get("instruction_id_list"), fields.get("kwargs")
    mode = fields.get("grading_mode") or "binary"
    if not isinstance(ids, list) or not ids:
        raise _RowError("missing_field", "the row has no instruction_id_list (a non-empty list)")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise _RowError("missing_field", "the row's kwargs must be a list as long as instruction_id_list")
    if mode not in GRADING_MODES:
        raise _RowError("invalid_grading_mode", f"grading_mode must be one of {GRADING_MODES}, got {mode!r}")
    return ids, kwargs, mode


def _failed(count: int, error_type: str, message: str) -> InstructionFollowingResult:
    return InstructionFollowingResult(
        reward=0.0,
        follow_all_instructions=False,
        follow_instruction_list=[False] * count,
        error_type=error_type,
        error_message=message,
    )


async def verify(request: InstructionFollowingVerifyRequest, session: Session) -> InstructionFollowingResult:
    """Check the last output text against every instruction of the row."""
    try:
        ids, kwargs, mode = _instructions(_fields(request))
    except _RowError as exc:
        return _failed(0, exc.error_type, str(exc))
    text = last_item_text(request.response.output)
    if not text.strip():
        return _failed(len(ids), "empty_response", "the last output item has no text")
    results = [check_instruction(one, args, text) for one, args in zip(ids, kwargs, strict=True)]
    followed = [ok for ok, _ in results]
    problems = [problem for _, problem in results if problem]
    reward = float(all(followed)) if mode == "binary" else sum(followed) / len(followed)
    return InstructionFollowingResult(
        reward=reward,
        follow_all_instructions=all(followed),
        follow_instruction_list=followed,
        error_type="instruction_error" if problems else None,
        error_message="; ".join(problems) if problems else None,
    )


ENVIRONMENT = Environment(
    name="instruction_following",
    verify=verify,
    verify_request=InstructionFollowingVerifyRequest,
    agents=("instruction_following_simple_agent",),
    description="IFEval/IFBench verifiable instructions; binary or fraction reward (NeMo Gym's rules).",
    startup=load_libraries,
    cpu_bound=True,
)
