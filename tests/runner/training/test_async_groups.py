"""A group of rollouts scored into the asynchronous trainer's samples: the advantages a group
of the successful rollouts alone gets, the oldest version a rollout's calls named, samples
past `max_staleness` dropped, calls that named no version refused, and what TRL reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gymbus.runner.training._groups import advantages, read_member, score_group
from gymbus.schemas import FAILURE_CLASS, FAILURE_MESSAGE, STATS

np = pytest.importorskip("numpy")
pytest.importorskip("trl")

PROMPT = [{"role": "user", "content": "q"}]
AGENT = "letters_agent"


def call(prompt: list[int], generation: list[int], version: int | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi j"}],
        "prompt_token_ids": prompt, "generation_token_ids": generation,
        "generation_log_probs": [-0.5] * len(generation),
    }  # fmt: skip
    if version is not None:
        item["policy_version"] = version
    return item


def rollout(reward: float, *versions: int | None, delivery: int = 1) -> bytes:
    """A rollout of one call per version; the second call's prompt adds a tool's tokens."""
    output = [call([1, 2, 3], [4, 5], versions[0])]
    if len(versions) > 1:
        output += [
            {"type": "function_call_output", "call_id": "c", "output": "x"},
            call([1, 2, 3, 4, 5, 9], [6], versions[1]),
        ]
    row = {
        "responses_create_params": {"input": "q"},
        "agent_ref": {"name": AGENT},
        "response": {"id": "r", "created_at": 0, "model": "m", "output": output},
        "reward": reward,
        STATS: {"delivery": delivery},
    }
    return json.dumps(row).encode()


def failed() -> bytes:
    return json.dumps({"responses_create_params": {"input": "q"}, FAILURE_CLASS: "model_failed",
                       FAILURE_MESSAGE: "HTTP 500"}).encode()  # fmt: skip


def test_failed_rollouts_leave_the_others_the_advantages_of_a_group_of_their_own() -> None:
    members = [
        read_member(row, AGENT, True) for row in (rollout(1.0, 3), rollout(0.0, 3), failed(), rollout(1.0, 3))
    ]
    outcome = score_group(members, group_id=7, prompt=PROMPT, current=3, max_staleness=1)
    alone = advantages([1.0, 0.0, 1.0])
    assert [sample.advantage for sample in outcome.samples] == pytest.approx(alone)
    rewards = np.array([1.0, 0.0, 1.0])
    assert alone == pytest.approx(list((rewards - rewards.mean()) / (rewards.std() + 1e-8)))
    assert outcome.failures == {"model_failed": 1} and "HTTP 500" in outcome.first_failure
    assert all(sample.group_id == 7 for sample in outcome.samples)


def test_a_group_whose_rollouts_all_failed_yields_nothing() -> None:
    members = [read_member(failed(), AGENT, True) for _ in range(4)]
    outcome = score_group(members, 1, PROMPT, current=3, max_staleness=1)
    assert outcome.samples == [] and outcome.rewards == [] and outcome.failures == {"model_failed": 4}


def test_a_rollout_is_as_old_as_its_oldest_call_and_stale_ones_are_dropped() -> None:
    members = [
        read_member(row, AGENT, True) for row in (rollout(1.0, 5, 6), rollout(0.0, 3, 6), rollout(1.0, 6, 6))
    ]
    assert [member.version for member in members] == [5, 3, 6]
    outcome = score_group(members, 1, PROMPT, current=6, max_staleness=2)
    assert [sample.model_version for sample in outcome.samples] == [5, 6]
    assert outcome.stale == 1 and outcome.staleness == [1, 0]
    # The dropped one still counted in its group's statistics: it was a fair sample.
    first, _, third = advantages([1.0, 0.0, 1.0])
    assert [sample.advantage for sample in outcome.samples] == pytest.approx([first, third])


def test_a_call_that_named_no_policy_version_fails_its_rollout_unless_adapters_are_off() -> None:
    refused = read_member(rollout(1.0, 4, None), AGENT, versions_required=True)
    assert refused.failure is not None and refused.failure.startswith("no_policy_version: 1 of its 2")
    ablation = read_member(rollout(1.0, None), AGENT, versions_required=False)
    assert ablation.failure is None and ablation.version is None
    outcome = score_group(
        [ablation, read_member(rollout(0.0, None), AGENT, False)], 1, PROMPT, current=9, max_staleness=0
    )
    assert [sample.model_version for sample in outcome.samples] == [9, 9]  # counted as current


def test_dynamic_sampling_drops_a_group_of_equal_rewards() -> None:
    members = [read_member(rollout(1.0, 2), AGENT, True) for _ in range(3)]
    assert score_group(members, 1, PROMPT, 2, 1, dynamic_sampling=True).uniform
    kept = score_group(members, 1, PROMPT, 2, 1, dynamic_sampling=False)
    assert len(kept.samples) == 3 and all(sample.advantage == 0.0 for sample in kept.samples)


def test_samples_are_what_trl_reads_numpy_arrays_aligned_on_the_whole_sequence() -> None:
    member = read_member(rollout(1.0, 2, 2, delivery=2), AGENT, True)
    assert member.redelivered
    sample = score_group([member, read_member(rollout(0.0, 2), AGENT, True)], 4, PROMPT, 2, 1).samples[0]
    # prompt [1 2 3], generation [4 5], tool tokens [9], generation [6]
    assert sample.input_ids.tolist() == [1, 2, 3, 4, 5, 9, 6] and sample.input_ids.dtype == np.int64
    assert sample.completion_mask.tolist() == [0, 0, 0, 1, 1, 0, 1]
    assert sample.old_log_probs.tolist() == [0.0, 0.0, 0.0, -0.5, -0.5, 0.0, -0.5]
    assert sample.old_log_probs.dtype == np.float32
    assert sample.metrics == {"reward": 1.0, "reward_std": 0.5, f"rewards/{AGENT}": 1.0}
    assert sample.completion == [{"role": "assistant", "content": "hi jhi j"}] and sample.prompt == PROMPT
