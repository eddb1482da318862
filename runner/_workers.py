"""Worker processes a command (`collect`, `verify`, `check`) starts for itself, on the
embedded server: started, waited for until they serve what they were started for, and
stopped, also when starting them fails."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gymbus.bus import ENV_VARS, Bus, BusAuth, ServeOptions, die_with_parent
from gymbus.schemas import BusUnavailable, Timeouts

__all__ = ["WorkerProcesses", "start_workers", "stop_workers", "worker_command"]


def worker_command(options: ServeOptions) -> list[str]:
    """The command line of one worker process serving `options.functions`. `-P`: nothing
    in the caller's working directory (a trainer's own `nats.py`, say) is imported first."""
    command = [
        sys.executable, "-P", "-m", "gymbus.runner", "serve", *options.functions,
        "--served-model", options.served_model,
        "--ack-wait", str(options.timeouts.ack_wait),
        "--concurrency", str(options.limits.agent_concurrency),
    ]  # fmt: skip
    if options.model.base_url:
        command += ["--model-url", options.model.base_url, "--model-api", options.model.api]
    if options.model.model:
        command += ["--model", options.model.model]
    if not options.model.token_capture:
        command += ["--no-token-capture"]
    return command


class WorkerProcesses:
    """`count` processes of `gym-runner serve` connecting with `auth`, their output
    appended to `log`, which is kept: failure rows of a bug say "see the worker log"."""

    def __init__(
        self, options: ServeOptions, url: str, log: Path, count: int = 1, auth: BusAuth | None = None
    ) -> None:
        self.options = options
        self.url = url
        self.auth = auth or BusAuth()
        self.count = count
        self.children: list[subprocess.Popen[bytes]] = []
        self.log = log

    def start(self) -> None:
        # Credentials by environment (a file's path), never on a command line.
        inherited = {name: value for name, value in os.environ.items() if name not in ENV_VARS}
        env = {**inherited, "NATS_URL": self.url, **self.auth.as_env()}
        if self.options.model.api_key:
            env["POLICY_API_KEY"] = self.options.model.api_key  # by environment, never on a command line
        with open(self.log, "ab") as log:
            for _ in range(self.count):
                self.children.append(
                    subprocess.Popen(
                        worker_command(self.options),
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        # Out of our process group: a terminal's Ctrl-C is for the runner,
                        # which stops the workers once the rollouts in flight are written.
                        start_new_session=True,
                        preexec_fn=die_with_parent,  # noqa: PLW1509 - no threads yet; workers die with us
                    )
                )

    def check(self) -> None:
        """`BusUnavailable` with the log's tail if a worker has exited."""
        for child in self.children:
            if child.poll() is not None:
                raise BusUnavailable(f"a worker process exited with code {child.returncode}:\n{self._tail()}")

    def check_any_alive(self) -> None:
        """`BusUnavailable` with the log's tail once every worker has exited (one that is left
        takes the tasks of the others)."""
        if self.children and all(child.poll() is not None for child in self.children):
            codes = ", ".join(str(child.returncode) for child in self.children)
            raise BusUnavailable(f"every worker process exited (codes {codes}):\n{self._tail()}")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def stop(self, timeout: float) -> None:
        """SIGTERM every worker (they finish in-flight work), SIGKILL any left after `timeout`."""
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in self.children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


async def start_workers(
    bus: Bus, groups: Sequence[tuple[WorkerProcesses, Sequence[str]]], timeouts: Timeouts
) -> list[WorkerProcesses]:
    """Start each group and wait, up to `timeouts.worker_start`, until it serves its
    services; `BusUnavailable` (with the workers' log) if one exits first. On any failure,
    Ctrl-C included, every group is stopped before raising: none is left running without us."""
    for group, _ in groups:
        group.start()
    try:
        for group, services in groups:
            await bus.wait_served(list(services), timeouts.worker_start, check=group.check)
    except BaseException:
        for group, _ in groups:
            group.stop(timeouts.drain)
        raise
    return [group for group, _ in groups]


async def stop_workers(groups: Sequence[WorkerProcesses], timeout: float) -> None:
    """Stop every group (see `WorkerProcesses.stop`). In threads: the caller's connection
    keeps answering the server's pings meanwhile."""
    await asyncio.gather(*(asyncio.to_thread(group.stop, timeout) for group in groups))
