"""`gym-runner collect`: from an input JSONL to rewarded rollouts, through the task queue.

`_collect` runs a collection (plan, submit, write, finish), `_plan` reads and numbers the
input, `_ledger` keeps the rollouts in flight, `_sink` writes each result once, `_lock`
keeps one run per output, `_summary` is the report and exit status, `_command` the CLI.
"""

from ._collect import CollectOptions, CollectResult, collect
from ._plan import BadRow, Plan, PlannedRollout

__all__ = ["BadRow", "CollectOptions", "CollectResult", "Plan", "PlannedRollout", "collect"]
