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

import typing as _typing
from importlib import import_module as _import_module

if _typing.TYPE_CHECKING:
    from ._progress import ProgressView
    from .checks import CheckItem, EnvironmentContract, check_environment
    from .cli import app, main
    from .collection import BadRow, CollectOptions, CollectResult, Plan, PlannedRollout, collect
    from .preparation import PrepareOptions, PrepareReport, prepare
    from .serving import serve
    from .training import (
        BusRollouts,
        BusRolloutWorker,
        Sampling,
        StitchError,
        TokenSequence,
        environment_reward,
        prompt_messages,
        stitch,
        tasks_dataset,
    )
    from .verification import VerifyOptions, VerifyPaths, VerifyReport, verify_rollouts

# Loaded when first used: a process imports only the rooms of what it runs (a worker
# process, `serve`, never the viewer, `prepare` or `secure`).
_WHERE = {
    "BadRow": ".collection",
    "BusRolloutWorker": ".training",
    "BusRollouts": ".training",
    "CheckItem": ".checks",
    "CollectOptions": ".collection",
    "CollectResult": ".collection",
    "EnvironmentContract": ".checks",
    "Plan": ".collection",
    "PlannedRollout": ".collection",
    "PrepareOptions": ".preparation",
    "PrepareReport": ".preparation",
    "ProgressView": "._progress",
    "Sampling": ".training",
    "StitchError": ".training",
    "TokenSequence": ".training",
    "VerifyOptions": ".verification",
    "VerifyPaths": ".verification",
    "VerifyReport": ".verification",
    "app": ".cli",
    "check_environment": ".checks",
    "collect": ".collection",
    "environment_reward": ".training",
    "main": ".cli",
    "prepare": ".preparation",
    "prompt_messages": ".training",
    "serve": ".serving",
    "stitch": ".training",
    "tasks_dataset": ".training",
    "verify_rollouts": ".verification",
}

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
    "serve",
    "stitch",
    "tasks_dataset",
    "verify_rollouts",
]


def __getattr__(name: str) -> _typing.Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
