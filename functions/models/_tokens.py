"""Token capture: the exact token ids a model saw and generated in each call of a rollout.

Each model call's last output item carries NeMo Gym's three fields: `prompt_token_ids`
(the call's whole prompt), `generation_token_ids` and `generation_log_probs` (one logprob
per generated token); all three or none. A trainer stitches a rollout from them: the first
call's prompt; then, for each call, the tokens its prompt adds after the previous call's
prompt + generation (tool outputs, user turns, template markup: not trained) and its
generation (trained). That is only right if every call's prompt starts with the previous
call's prompt + generation, token for token.

A server that re-renders the conversation from text does not promise that: the text of a
generation need not tokenize back to the sampled ids, and chat templates rewrite earlier
turns (dropping `<think>` blocks, say). So each later call's prompt is built from the ids
themselves (`continue_prompt`): the previous prompt + generation, then what the re-rendered
conversation has after the end-of-turn token that closed the previous generation. A
history that cannot be continued that way is an error naming the call, never a silently
different prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from msgspec import UnsetType

from gymbus.schemas import BadRequest, FunctionFailed, Item, Response

__all__ = ["CallTokens", "History", "continue_prompt", "generation_of", "history_of", "with_tokens"]

_TOKEN_ID = "token_id:"


@dataclass(frozen=True)
class CallTokens:
    """What one model call saw and generated, and the policy version that generated it
    (`None`: the call named no adapter of a policy under training)."""

    prompt: list[int]
    generation: list[int]
    logprobs: list[float]
    policy_version: int | None = None


@dataclass(frozen=True)
class History:
    """What came before this call in the rollout: the previous call's prompt + generation
    (empty for a rollout's first call) and this call's number (1 for the first)."""

    seen: list[int]
    step: int


def history_of(items: Sequence[Item]) -> History:
    """The token history carried by a request's input items (the last item of each earlier
    model call carries that call's token ids). `BadRequest` if an item carries some of the
    three token fields but not all, or logprobs that do not match its generation."""
    calls, seen = 0, []
    for index, item in enumerate(items):
        tokens = _tokens_of(item, index)
        if tokens is not None:
            calls, seen = calls + 1, [*tokens.prompt, *tokens.generation]
    return History(seen=seen, step=calls + 1)


def _tokens_of(item: Item, index: int) -> CallTokens | None:
    fields = (item.prompt_token_ids, item.generation_token_ids, item.generation_log_probs)
    if all(isinstance(field, UnsetType) for field in fields):
        return None
    prompt, generation, logprobs = fields
    if (
        isinstance(prompt, list)
        and isinstance(generation, list)
        and isinstance(logprobs, list)
        and len(generation) == len(logprobs)
    ):
        return CallTokens(prompt, generation, logprobs)
    raise BadRequest(
        f"input item {index} carries incomplete token fields: prompt_token_ids, generation_token_ids "
        "and generation_log_probs go together, with one logprob per generated token"
    )


def continue_prompt(history: History, templated: list[int]) -> list[int]:
    """This call's prompt: `templated` (the server's rendering of the whole conversation)
    when it starts with everything seen so far; otherwise what was seen, followed by what
    `templated` has after the end-of-turn token that closed the previous generation (its
    last token, found by counting: the n-th occurrence in `templated` where it is the n-th
    in what was seen). `BadRequest` naming the call if there is no such token."""
    seen = history.seen
    if templated[: len(seen)] == seen:
        return templated
    end = seen[-1]
    position = _nth_index(templated, end, seen.count(end))
    if position is None:
        raise BadRequest(
            f"model call {history.step}: the conversation does not continue the token ids of model call "
            f"{history.step - 1} (its prompt and generation), and its end-of-turn token {end} is not in the "
            "re-rendered conversation, so the exact prompt cannot be rebuilt"
        )
    return [*seen, *templated[position + 1 :]]


def _nth_index(tokens: list[int], token: int, n: int) -> int | None:
    found = -1
    for _ in range(n):
        try:
            found = tokens.index(token, found + 1)
        except ValueError:
            return None
    return found


def generation_of(
    token_ids: list[int] | None, entries: Sequence[tuple[str, float | None]], where: str
) -> tuple[list[int], list[float]]:
    """The generated ids and their logprobs from a reply: `token_ids` if the server sent
    them, else the ids named by the `token_id:<id>` logprob entries; both must agree.
    `FunctionFailed` (retrying cannot help) if the reply lacks them."""
    if token_ids is None and not entries:
        raise FunctionFailed(
            f"{where}: the server returned no token ids or logprobs although token capture is on "
            "(serve vLLM, which returns them when asked; or turn token capture off)"
        )
    named = [_token_id(token) for token, _ in entries]
    ids = token_ids if token_ids is not None else [name for name in named if name is not None]
    if len(entries) != len(ids) or named != ids:
        raise FunctionFailed(
            f"{where}: the server's token ids and logprobs do not match ({len(ids)} ids, {len(entries)} "
            "logprobs); logprob entries must name their token ids (return_tokens_as_token_ids)"
        )
    return list(ids), [float("-inf") if logprob is None else logprob for _, logprob in entries]


def _token_id(token: str) -> int | None:
    if not token.startswith(_TOKEN_ID):
        return None
    try:
        return int(token[len(_TOKEN_ID) :])
    except ValueError:
        return None


def with_tokens(response: Response, tokens: CallTokens) -> Response:
    """`response` with `tokens` (and the policy version, if any) on its last output item
    (a response without output carries none)."""
    if not response.output:
        return response
    version = msgspec.UNSET if tokens.policy_version is None else tokens.policy_version
    last = msgspec.structs.replace(
        response.output[-1],
        prompt_token_ids=tokens.prompt,
        generation_token_ids=tokens.generation,
        generation_log_probs=tokens.logprobs,
        policy_version=version,
    )
    return msgspec.structs.replace(response, output=[*response.output[:-1], last])
