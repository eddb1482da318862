"""The `gym-runner` command line and its commands, one room each (`collection/`,
`verification/`, `viewer/`, `preparation/`, `training/`, `checks/`, `serving/`,
`security/`); `cli.py` assembles them.

`collect` fans the rows of a NeMo Gym JSONL out as durable tasks and gathers the
rewarded rollouts; `verify` re-scores stored rollouts with today's verifiers; `serve`
hosts functions as workers; `status` shows what is live; `prepare` validates, blends
and splits datasets; `check` tells an environment's author what it gets wrong.
`BusRollouts` is TRL's rollout function on the same task queue, with `tasks_dataset`
and `environment_reward`; `BusRolloutWorker` is the rollout worker of TRL's asynchronous
trainer.
"""

from ._progress import ProgressView
from .checks import CheckItem, EnvironmentContract, check_environment
from .cli import app, main
from .collection import BadRow, CollectOptions, CollectResult, Plan, PlannedRollout, collect, run_id_for
from .preparation import PrepareOptions, PrepareReport, prepare
from .serving import serve
from .training import (
    BusRolloutWorker,
    BusRollouts,
    Sampling,
    StitchError,
    TokenSequence,
    environment_reward,
    prompt_messages,
    stitch,
    tasks_dataset,
)
from .verification import VerifyOptions, VerifyPaths, VerifyReport, verify_rollouts

__all__ = [
    "BadRow",
    "BusRolloutWorker",
    "BusRollouts",
    "CheckItem",
    "CollectOptions",
    "CollectResult",
    "EnvironmentContract",
    "Plan",
    "PlannedRollout",
    "PrepareOptions",
    "PrepareReport",
    "ProgressView",
    "Sampling",
    "StitchError",
    "TokenSequence",
    "VerifyOptions",
    "VerifyPaths",
    "VerifyReport",
    "app",
    "check_environment",
    "collect",
    "environment_reward",
    "main",
    "prepare",
    "prompt_messages",
    "run_id_for",
    "serve",
    "stitch",
    "tasks_dataset",
    "verify_rollouts",
]
