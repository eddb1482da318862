"""A dataset row as the task a trainer publishes: the trainer's sampling written into its
`responses_create_params` (`Sampling`), its place in the dataset and its repeat stamped as
NeMo Gym does (`_ng_task_index`, `_ng_rollout_index`), and, for asynchronous training, the
policy whose current version its model calls must use (`metadata.gymbus_policy`)."""

from __future__ import annotations

import msgspec

from gymbus.schemas import (
    POLICY_KEY,
    RESPONSES_CREATE_PARAMS,
    ROLLOUT_INDEX,
    TASK_INDEX,
    AgentRef,
    TaskRow,
    merge_row,
)

from ._batches import BatchTask
from ._sampling import Sampling

__all__ = ["task_for"]

_task_decoder = msgspec.json.Decoder(TaskRow)


def task_for(
    task: str,
    label: str,
    position: int,
    repeat: int,
    sampling: Sampling,
    training: bool,
    policy: str | None = None,
) -> BatchTask:
    """The task of repeat `repeat` of the row at `position` (`task`, its JSON; `label` names
    it in errors). `ValueError` naming the row if it has no agent or would change the
    trainer's sampling."""
    row = _task_decoder.decode(task)
    agent = row.agent_ref.name if isinstance(row.agent_ref, AgentRef) else None
    if agent is None:
        raise ValueError(f"{label} has no agent_ref")
    params = sampling.apply(row.responses_create_params, label, training)
    if policy is not None:
        metadata = dict(params.metadata) if isinstance(params.metadata, dict) else {}
        params = msgspec.structs.replace(params, metadata={**metadata, POLICY_KEY: policy})
    fields = {RESPONSES_CREATE_PARAMS: params, TASK_INDEX: position, ROLLOUT_INDEX: repeat}
    return BatchTask(agent, merge_row(task.encode(), **fields))
