"""Training with TRL on rollouts from the bus.

`_rollouts` is `BusRollouts`, GRPOTrainer's rollout function; `_batches` runs a batch of
rollouts as a run of the task queue; `_sampling` is the sampling every request of a
training run carries; `_task_rows` writes it into a task; `_data` is the dataset a
trainer reads and the way back from a prompt to its task row; `_tokens` stitches a
rollout's model calls into one sequence.

Asynchronous training: `_worker` is `BusRolloutWorker`, the rollout worker of TRL's
`AsyncGRPOTrainer`; `_stream` admits and gathers its groups of rollouts, `_groups` scores
them into samples, `_relay` is where TRL's adapter sync reaches the bus.
"""

from ._data import prompt_messages, tasks_dataset
from ._rollouts import BusRollouts, environment_reward
from ._sampling import Sampling
from ._tokens import StitchError, TokenSequence, stitch
from ._worker import BusRolloutWorker

__all__ = [
    "BusRolloutWorker",
    "BusRollouts",
    "Sampling",
    "StitchError",
    "TokenSequence",
    "environment_reward",
    "prompt_messages",
    "stitch",
    "tasks_dataset",
]
