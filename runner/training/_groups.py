"""A group of rollouts (one prompt, `num_generations` times) scored into the samples TRL's
`AsyncGRPOTrainer` trains on.

Each rollout row is stitched as the synchronous path stitches it (`_tokens.stitch`: model
tokens trained, environment tokens masked) and tagged with the policy version its model
calls used (`Item.policy_version`), the **oldest** where they differ: a rollout is as stale
as its oldest call. With adapters delivered, a call that names no version is a failure:
it came from some other model, and counting it as the policy's would train on it as new.

Advantages are GRPO's, over the group's **successful** rollouts only: `(r - mean) / (std +
1e-8)` with the population standard deviation, as TRL's own worker computes them. A failed
rollout (the agent's failure row, no token ids, a history that does not stitch) yields no
sample and leaves the others' statistics alone; a group where every rollout failed yields
nothing. With dynamic sampling, a group whose rewards are all equal (no learning signal)
yields nothing either. A sample already more than `max_staleness` versions old when its
group completes is dropped (the trainer would drop it) and counted.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gymbus.schemas import AgentRef, Rollout, output_text

from ._tokens import StitchError, TokenSequence, stitch

__all__ = ["GroupOutcome", "Member", "advantages", "read_member", "sample_type", "score_group"]

_rollout_decoder = msgspec.json.Decoder(Rollout)


@dataclass(frozen=True)
class Member:
    """One rollout of a group: its tokens, reward and version, or why it failed."""

    agent: str
    sequence: TokenSequence | None = None
    reward: float = 0.0
    version: int | None = None
    """The oldest policy version its model calls named (`None`: none named one)."""
    text: str = ""
    failure: str | None = None
    """`<failure class>: <message>` for a failed rollout."""
    redelivered: bool = False
    """Its task was delivered more than once (an agent worker died on it)."""


def read_member(row: bytes, agent: str, versions_required: bool) -> Member:
    """A rollout row as a group member."""
    try:
        rollout = _rollout_decoder.decode(row)
    except msgspec.DecodeError as exc:
        return Member(agent, failure=f"bad_result: the rollout row does not decode: {exc}")
    if isinstance(rollout.agent_ref, AgentRef):
        agent = rollout.agent_ref.name
    redelivered = not isinstance(rollout.stats, msgspec.UnsetType) and rollout.stats.delivery > 1
    if isinstance(rollout.failure_class, str):
        message = rollout.failure_message if isinstance(rollout.failure_message, str) else ""
        return Member(agent, failure=f"{rollout.failure_class}: {message}", redelivered=redelivered)
    if isinstance(rollout.response, msgspec.UnsetType):
        return Member(agent, failure="bad_result: the rollout row has no response")
    output = rollout.response.output
    try:
        sequence = stitch(output)
    except StitchError as exc:
        return Member(agent, failure=f"{exc.failure_class}: {exc.message}")
    versions = [item.policy_version for item in output if isinstance(item.generation_token_ids, list)]
    named = [version for version in versions if isinstance(version, int)]
    if versions_required and len(named) < len(versions):
        return Member(
            agent,
            failure=f"no_policy_version: {len(versions) - len(named)} of its {len(versions)} model calls named no "
            "version of the policy under training (is the policy served by the `vllm` model function on this bus?)",
        )
    return Member(
        agent,
        sequence,
        float(rollout.reward),
        min(named) if named else None,
        output_text(rollout.response),
        redelivered=redelivered,
    )


def advantages(rewards: list[float | None]) -> list[float | None]:
    """GRPO's advantages of a group, over the rewards that are not `None` (failed rollouts,
    which get `None`): `(r - mean) / (std + 1e-8)`, population standard deviation."""
    scored = [reward for reward in rewards if reward is not None]
    if not scored:
        return [None] * len(rewards)
    mean, std = _mean_std(scored)
    return [None if reward is None else (reward - mean) / (std + 1e-8) for reward in rewards]


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (numpy's `std`, `ddof=0`)."""
    mean = sum(values) / len(values)
    return mean, (sum((value - mean) ** 2 for value in values) / len(values)) ** 0.5


@dataclass
class GroupOutcome:
    """What a group yields, and what it dropped."""

    samples: list[Any] = field(default_factory=list)
    """`RolloutSample`s, one per successful, fresh-enough rollout."""
    failures: Counter[str] = field(default_factory=Counter)
    """Failed rollouts, by failure class."""
    first_failure: str = ""
    stale: int = 0
    """Samples dropped for being more than `max_staleness` versions old."""
    uniform: bool = False
    """Dropped whole by dynamic sampling: every reward equal."""
    rewards: list[float] = field(default_factory=list)
    """The successful rollouts' rewards."""
    staleness: list[int] = field(default_factory=list)
    """Each sample's versions behind the trainer when the group completed."""


def sample_type() -> Any:
    """TRL's `RolloutSample` (its import takes seconds: do it before the work starts)."""
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample  # the trainer's dependency

    return RolloutSample


def score_group(
    members: list[Member],
    group_id: int,
    prompt: list[dict[str, str]],
    current: int,
    max_staleness: int,
    dynamic_sampling: bool = False,
) -> GroupOutcome:
    """The samples of a complete group; `current` is the trainer's policy version now, which
    also tags a rollout whose calls named none (adapters not delivered: the ablation)."""
    RolloutSample = sample_type()
    outcome = GroupOutcome()
    for member in members:
        if member.failure is not None:
            outcome.failures[member.failure.split(":", 1)[0]] += 1
            outcome.first_failure = outcome.first_failure or member.failure
    good = [member for member in members if member.failure is None]
    outcome.rewards = [member.reward for member in good]
    if not good or (dynamic_sampling and len(set(outcome.rewards)) == 1):
        outcome.uniform = bool(good)
        return outcome
    scores = advantages([member.reward for member in good])
    std = _mean_std(outcome.rewards)[1]
    now = time.time()
    for member, advantage in zip(good, scores, strict=True):
        assert member.sequence is not None and advantage is not None
        version = current if member.version is None else member.version
        staleness = current - version
        if staleness > max_staleness:
            outcome.stale += 1
            continue
        outcome.staleness.append(staleness)
        outcome.samples.append(_sample(RolloutSample, member, advantage, version, group_id, prompt, std, now))
    return outcome


def _sample(
    kind: Any,
    member: Member,
    advantage: float,
    version: int,
    group_id: int,
    prompt: list[dict[str, str]],
    std: float,
    now: float,
) -> Any:
    import numpy as np  # the trainer's dependency (TRL's)

    sequence = member.sequence
    assert sequence is not None
    context = len(sequence.prompt_ids)
    return kind(
        prompt=prompt,
        completion=[{"role": "assistant", "content": member.text}],
        input_ids=np.asarray(sequence.prompt_ids + sequence.completion_ids, dtype=np.int64),
        completion_mask=np.asarray([0] * context + sequence.env_mask, dtype=np.int64),
        # TRL reads the sampler's logprob of token p at index p (0.0 where it does not train).
        old_log_probs=np.asarray([0.0] * context + sequence.logprobs, dtype=np.float32),
        advantage=advantage,
        model_version=version,
        group_id=group_id,
        metrics={"reward": member.reward, "reward_std": std, f"rewards/{member.agent}": member.reward},
        enqueued_at=now,
    )
