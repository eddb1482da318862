"""One rollout's model calls stitched into the token sequence a trainer learns from.

Each model call's last output item carries `prompt_token_ids`, `generation_token_ids`
and `generation_log_probs` (NeMo Gym's names). The first call's prompt is the rollout's
prompt. Each later call's prompt must begin with everything before it (the previous
prompt and generation); the tokens it adds are what the environment said in between
(tool outputs, a simulated user's message, the chat template's framing): environment
tokens, mask 0, logprob 0.0. Each generation follows with mask 1 and its logprobs.

A later prompt that does not extend what came before means the server saw something
other than what would be stitched: that is a `StitchError` naming the call, never a
sample with the wrong tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gymbus.schemas import Item

__all__ = ["StitchError", "TokenSequence", "stitch"]


class StitchError(ValueError):
    """A rollout whose token ids cannot make one sequence; `failure_class` says why."""

    def __init__(self, failure_class: str, message: str) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message


@dataclass(frozen=True)
class TokenSequence:
    """A rollout as a trainer reads it. `completion_ids`, `env_mask` and `logprobs` have
    one entry per token after the prompt; `num_turns` counts the model calls."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    num_turns: int


def stitch(output: Sequence[Item]) -> TokenSequence:
    """The token sequence of a rollout whose generated items are `output`.

    Items without token ids (tool outputs, a simulated user's messages) are skipped: their
    tokens reach the sequence through the next call's prompt. Raises `StitchError` when no
    item carries token ids, when an item carries only some of the three fields or
    logprobs that do not match its tokens, when a later prompt does not extend what came
    before, or when the model generated nothing at all.
    """
    calls = [item for item in output if _has_tokens(item)]
    if not calls:
        raise StitchError("no_token_ids", "no model call carried token ids (is token capture on?)")
    prompt = _ids(calls[0], 1).prompt
    seen = list(prompt)
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for number, item in enumerate(calls, start=1):
        call = _ids(item, number)
        if number > 1:
            extra = _extension(seen, call.prompt, number)
            completion += extra
            mask += [0] * len(extra)
            logprobs += [0.0] * len(extra)
        completion += call.generation
        mask += [1] * len(call.generation)
        logprobs += call.logprobs
        seen = call.prompt + call.generation
    if not any(mask):
        raise StitchError("empty_completion", f"the model generated no tokens in {len(calls)} call(s)")
    return TokenSequence(prompt, completion, mask, logprobs, len(calls))


@dataclass(frozen=True)
class _CallIds:
    prompt: list[int]
    generation: list[int]
    logprobs: list[float]


def _has_tokens(item: Item) -> bool:
    return any(
        isinstance(value, list)
        for value in (item.prompt_token_ids, item.generation_token_ids, item.generation_log_probs)
    )


def _ids(item: Item, number: int) -> _CallIds:
    prompt, generation, logprobs = item.prompt_token_ids, item.generation_token_ids, item.generation_log_probs
    if not (isinstance(prompt, list) and isinstance(generation, list) and isinstance(logprobs, list)):
        raise StitchError(
            "bad_token_ids",
            f"model call {number} carries only some of prompt_token_ids, generation_token_ids "
            "and generation_log_probs",
        )
    if len(logprobs) != len(generation):
        raise StitchError(
            "bad_token_ids",
            f"model call {number} has {len(generation)} generated tokens but {len(logprobs)} logprobs",
        )
    return _CallIds(prompt, generation, [float(value) for value in logprobs])


def _extension(seen: list[int], prompt: list[int], number: int) -> list[int]:
    """The tokens `prompt` adds after `seen`; `StitchError` if it does not start with `seen`."""
    if prompt[: len(seen)] == seen:
        return prompt[len(seen) :]
    differs = next(
        (i for i, (a, b) in enumerate(zip(seen, prompt, strict=False)) if a != b), min(len(seen), len(prompt))
    )
    raise StitchError(
        "not_contiguous",
        f"model call {number}'s prompt ({len(prompt)} tokens) does not extend the previous prompt and "
        f"generation ({len(seen)} tokens): they differ from token {differs} on",
    )
