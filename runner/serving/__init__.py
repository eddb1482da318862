"""`gym-runner serve` and `gym-runner status`: worker processes, and what is live on the bus.

`_serve` runs worker processes (here or as children), `_status` shows live functions and
task queues, `_command` is the CLI (and `gym-runner nemo-gym install`).
"""

from ._serve import serve, worker_command

__all__ = ["serve", "worker_command"]
