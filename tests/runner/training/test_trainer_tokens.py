"""Stitching a rollout's model calls into one prompt and one masked completion."""

from __future__ import annotations

import pytest

from gymbus.runner import StitchError, stitch
from gymbus.schemas import Item


def call(prompt: list[int], generation: list[int], logprobs: list[float] | None = None) -> Item:
    """The last output item of one model call, with its token ids."""
    return Item(
        type="message",
        role="assistant",
        content="...",
        prompt_token_ids=prompt,
        generation_token_ids=generation,
        generation_log_probs=logprobs if logprobs is not None else [-0.5] * len(generation),
    )


def test_one_call_is_its_prompt_and_its_generation() -> None:
    sequence = stitch([call([1, 2, 3], [7, 8], [-0.1, -0.2])])
    assert sequence.prompt_ids == [1, 2, 3]
    assert sequence.completion_ids == [7, 8]
    assert sequence.env_mask == [1, 1]
    assert sequence.logprobs == [-0.1, -0.2]
    assert sequence.num_turns == 1


def test_what_the_environment_adds_between_calls_is_masked_with_logprob_zero() -> None:
    tool_output = Item(type="function_call_output", call_id="c1", output="cold")
    first = call([1, 2], [3, 4], [-1.0, -2.0])
    second = call([1, 2, 3, 4, 50, 51, 52], [5], [-3.0])
    sequence = stitch([first, tool_output, second])
    assert sequence.prompt_ids == [1, 2]
    assert sequence.completion_ids == [3, 4, 50, 51, 52, 5]
    assert sequence.env_mask == [1, 1, 0, 0, 0, 1]
    assert sequence.logprobs == [-1.0, -2.0, 0.0, 0.0, 0.0, -3.0]
    assert sequence.num_turns == 2


def test_items_of_a_call_other_than_its_last_add_nothing() -> None:
    reasoning = Item(type="reasoning", summary=[])
    sequence = stitch([reasoning, call([1], [2]), Item(role="user", content="next")])
    assert (sequence.completion_ids, sequence.num_turns) == ([2], 1)


def test_a_prompt_that_does_not_extend_the_previous_turn_fails_naming_the_call() -> None:
    first = call([1, 2], [3, 4])
    retemplated = call([1, 2, 3, 9, 60], [5])  # token 3 on differs: the server re-tokenised
    with pytest.raises(StitchError, match="model call 2's prompt") as failure:
        stitch([first, retemplated])
    assert failure.value.failure_class == "not_contiguous"
    assert "token 3" in failure.value.message


def test_a_shorter_later_prompt_is_not_contiguous_either() -> None:
    with pytest.raises(StitchError) as failure:
        stitch([call([1, 2], [3, 4]), call([1, 2, 3], [5])])
    assert failure.value.failure_class == "not_contiguous"


def test_no_token_ids_at_all_fails() -> None:
    plain = Item(type="message", role="assistant", content="hi")
    with pytest.raises(StitchError) as failure:
        stitch([plain])
    assert failure.value.failure_class == "no_token_ids"


def test_some_but_not_all_token_fields_fail() -> None:
    partial = Item(type="message", prompt_token_ids=[1], generation_token_ids=[2])
    with pytest.raises(StitchError) as failure:
        stitch([partial])
    assert failure.value.failure_class == "bad_token_ids"


def test_logprobs_that_do_not_match_the_tokens_fail() -> None:
    with pytest.raises(StitchError, match="2 generated tokens but 1 logprobs"):
        stitch([call([1], [2, 3], [-0.1])])


def test_a_rollout_whose_model_generated_nothing_fails() -> None:
    with pytest.raises(StitchError) as failure:
        stitch([call([1, 2], [], [])])
    assert failure.value.failure_class == "empty_completion"
