"""`gym-runner serve`, `gym-runner status` and `gym-runner sync-adapters`: worker processes,
what is live on the bus, and the process beside a vLLM server that loads a trainer's adapters.

`_serve` runs worker processes (here or as children), `_status` shows live functions and
task queues, `_adapters` keeps a server's adapters current, `_command` is the CLI (and
`gym-runner nemo-gym install`).
"""

from ._serve import serve, worker_command

__all__ = ["serve", "worker_command"]
