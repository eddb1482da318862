"""The run protocol, client side: a runner's tasks (signed, deduplicated, durable), their
results, the tasks JetStream gave up on, the run's bookkeeping (`RunBook`), and verdicts
asked for outside a rollout (`Verifier`).
"""

from ._dead_letters import ExhaustedTasks
from ._publish import TaskPublisher, task_headers
from ._pull import Puller
from ._run_book import (
    EXPIRED,
    RunBook,
    Submitted,
    given_up_message,
    not_sent_message,
    not_served,
    serve_hint,
    unserved_row,
)
from ._run_client import RunClient, RunResult
from ._runkeys import run_key, task_token, token_matches
from ._streams import (
    add_pull_consumer,
    add_results_consumer,
    ensure_streams,
    pull_results,
    results_consumer,
)
from ._verifier import Verifier

__all__ = [
    "ExhaustedTasks",
    "Puller",
    "EXPIRED",
    "RunBook",
    "RunClient",
    "RunResult",
    "Submitted",
    "TaskPublisher",
    "Verifier",
    "add_pull_consumer",
    "add_results_consumer",
    "ensure_streams",
    "given_up_message",
    "not_sent_message",
    "not_served",
    "pull_results",
    "results_consumer",
    "run_key",
    "serve_hint",
    "task_headers",
    "task_token",
    "token_matches",
    "unserved_row",
]
