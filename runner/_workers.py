"""Worker processes a command starts for itself, and their supervision: the one owner for
`collect`, `verify` and `check` on the embedded default, the front NeMo Gym starts from a
trainer's config, and `serve --replicas`.

Every process of a group serves the group's functions. One that exits while the group is
not stopping is replaced after a backoff (`Timeouts.worker_restart`, doubling up to
`Timeouts.worker_restart_most`), and the replacement is logged and counted (`restarts`):
the tasks the dead one held come back, to the others or to its replacement, by
redelivery. A process that exits within `Timeouts.worker_steady` of its start failed to
start; after `Limits.worker_failed_starts` of those in a row the group is given up on
(`failed` says why, from its log): a function that crashes on import is reported, not
restarted forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gymbus.bus import ENV_VARS, Bus, BusAuth, ServeOptions, die_with_parent
from gymbus.functions.nemo_gym import is_nemo_gym
from gymbus.schemas import BusUnavailable, Timeouts

__all__ = ["WorkerProcesses", "start_limit", "start_workers", "stop_workers", "worker_command"]

log = logging.getLogger("gymbus.workers")

POLL_EVERY = 0.25
"""Seconds between two looks at a group's processes: a dead worker is noticed within this."""


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


def _die_with_us() -> None:
    die_with_parent(signal.SIGKILL)


@dataclass
class _Slot:
    """One place in a group: its process, when it started, and its failed starts in a row."""

    process: subprocess.Popen[bytes]
    started: float
    failed_starts: int = 0
    restart_at: float | None = None
    """When the exited process is replaced; `None` while it runs."""
    replacement: bool = False
    """Whether its process replaced one that exited."""


class WorkerProcesses:
    """`count` processes of `gym-runner serve` connecting with `auth`, their output appended
    to `log`, which is kept: failure rows of a bug say "see the worker log" (`None`: to
    this process's own output). Supervised while `supervise()` runs, or whenever `check()`
    is called; see the module docstring."""

    def __init__(
        self,
        options: ServeOptions,
        url: str,
        log: Path | None,
        count: int = 1,
        auth: BusAuth | None = None,
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.options = options
        self.url = url
        self.auth = auth or BusAuth()
        self.count = count
        self.log = log
        self.timeouts = options.timeouts
        self.limits = options.limits
        self.extra_env = env or {}
        self.slots: list[_Slot] = []
        self.restarts = 0
        """Processes replaced so far."""
        self.failed: str | None = None
        """Why the group was given up on: its processes kept exiting as they started."""
        self.last_exit: str | None = None
        """How the last process that exited ended, with its log's last line."""
        self.stopping = False

    @property
    def name(self) -> str:
        return ", ".join(self.options.functions)

    @property
    def children(self) -> list[subprocess.Popen[bytes]]:
        """The current process of each slot (a replaced one's successor)."""
        return [slot.process for slot in self.slots]

    def start(self) -> None:
        """Start `count` processes."""
        now = time.monotonic()
        self.slots = [_Slot(self._spawn(), now) for _ in range(self.count)]

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Credentials by environment (a file's path), never on a command line.
        inherited = {name: value for name, value in os.environ.items() if name not in ENV_VARS}
        env = {**inherited, "NATS_URL": self.url, **self.auth.as_env(), **self.extra_env}
        if self.options.model.api_key:
            env["POLICY_API_KEY"] = self.options.model.api_key  # by environment, never on a command line
        with open(self.log, "ab") if self.log else contextlib.nullcontext() as out:
            process = subprocess.Popen(
                worker_command(self.options),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                stdin=subprocess.DEVNULL,
                # Out of our process group: a terminal's Ctrl-C is for the runner,
                # which stops the workers once the rollouts in flight are written.
                start_new_session=True,
                # Workers die with us, at once: with their supervisor gone nobody stops or
                # replaces them, the tasks they hold come back by redelivery, and on the
                # embedded bus the bus died with us (a SIGTERM would wait for it in vain).
                preexec_fn=_die_with_us,  # noqa: PLW1509 - no threads yet
            )
        log.debug("started worker process %d serving %s", process.pid, self.name)
        return process

    def poll(self, now: float | None = None) -> None:
        """Replace the processes that exited, once their backoff is over; give the group up
        after too many failed starts in a row."""
        now = time.monotonic() if now is None else now
        for slot in self.slots:
            if self.stopping or self.failed:
                return
            if slot.restart_at is None and slot.process.poll() is not None:
                self._exited(slot, now)
            elif slot.restart_at is not None and now >= slot.restart_at:
                slot.process, slot.started, slot.restart_at, slot.replacement = self._spawn(), now, None, True
                self.restarts += 1
                log.warning("replaced a worker process serving %s with process %d (%d replaced so far)",
                            self.name, slot.process.pid, self.restarts)  # fmt: skip

    def _exited(self, slot: _Slot, now: float) -> None:
        self.last_exit = f"worker process {slot.process.pid} {self._how_it_ended(slot.process.returncode)}"
        ran = now - slot.started
        slot.failed_starts = slot.failed_starts + 1 if ran < self.timeouts.worker_steady else 0
        if slot.failed_starts >= self.limits.worker_failed_starts:
            self.failed = (
                f"the worker processes serving {self.name} exited {slot.failed_starts} times in a row "
                f"as they started; the last: {self.last_exit}" + (f" (see {self.log})" if self.log else "")
            )
            log.error("%s; not restarting them", self.failed)
            return
        backoff = min(self.timeouts.worker_restart * 2 ** max(slot.failed_starts - 1, 0),
                      self.timeouts.worker_restart_most)  # fmt: skip
        slot.restart_at = now + backoff
        log.warning("%s after %.1f s; replacing it in %.1f s", self.last_exit, ran, backoff)

    def _how_it_ended(self, code: int) -> str:
        if code < 0:  # a signal: its log says nothing of why
            return f"was killed by {signal.Signals(-code).name}"
        line = self._last_line()  # a crash: its traceback's last line, most likely
        return f"exited with code {code}" + (f" ({line})" if line else "")

    def _last_line(self) -> str:
        lines = [line for line in self._tail().splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def _tail(self) -> str:
        if self.log is None:
            return ""
        try:
            with open(self.log, "rb") as log_file:
                log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - 4000))
                return log_file.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def replacing(self, now: float | None = None) -> bool:
        """Whether a process that exited is being replaced: it exited (noticed or not yet:
        `poll` looks every `POLL_EVERY`), its replacement waits for its backoff, or started
        less than `Timeouts.worker_start` ago (it may still be importing)."""
        if self.stopping or self.failed:
            return False
        now = time.monotonic() if now is None else now
        return any(self._replacing(slot, now) for slot in self.slots)

    def _replacing(self, slot: _Slot, now: float) -> bool:
        if slot.restart_at is not None or slot.process.poll() is not None:
            return True
        return slot.replacement and now - slot.started < self.timeouts.worker_start

    @property
    def alive(self) -> int:
        """How many of its processes run now."""
        return sum(1 for slot in self.slots if slot.process.poll() is None)

    def check(self) -> None:
        """Supervise once (`poll`); `BusUnavailable` with the log's tail if the group was
        given up on and none of its processes is left."""
        self.poll()
        if self.failed and not self.alive:
            raise BusUnavailable(f"{self.failed}:\n{self._tail()}")

    async def supervise(self) -> None:
        """Keep the group's processes running until it stops (`poll`, every `POLL_EVERY`)."""
        while not (self.stopping or self.failed):
            self.poll()
            await asyncio.sleep(POLL_EVERY)

    def stop(self, timeout: float) -> None:
        """SIGTERM every worker (they finish in-flight work), SIGKILL any left after `timeout`."""
        self.stopping = True
        for process in self.children:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.children:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Supervised:
    """Groups of worker processes started and supervised together until `stop`."""

    def __init__(self, groups: Sequence[WorkerProcesses]) -> None:
        self.groups = list(groups)
        self._tasks = [
            asyncio.create_task(group.supervise(), name=f"supervising {group.name}") for group in groups
        ]

    def check(self) -> None:
        """`BusUnavailable` once a group was given up on with none of its processes left."""
        for group in self.groups:
            group.check()

    async def stop(self, timeout: float) -> None:
        """Stop supervising, then stop every group (see `WorkerProcesses.stop`). In threads:
        the caller's connection keeps answering the server's pings meanwhile."""
        for group in self.groups:
            group.stopping = True
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(group.stop, timeout) for group in self.groups))


async def start_workers(
    bus: Bus, groups: Sequence[tuple[WorkerProcesses, Sequence[str]]], timeouts: Timeouts
) -> Supervised:
    """Start and supervise each group, and wait, up to `timeouts.worker_start`, until it
    serves its services; `BusUnavailable` (with the workers' log) if a group is given up on
    first. On any failure, Ctrl-C included, every group is stopped before raising: none is
    left running without us."""
    for group, _ in groups:
        group.start()
    supervised = Supervised([group for group, _ in groups])
    try:
        for group, services in groups:
            await bus.wait_served(list(services), start_limit(group, timeouts), check=group.check)
    except BaseException:
        await supervised.stop(timeouts.drain)
        raise
    return supervised


def start_limit(group: WorkerProcesses, timeouts: Timeouts) -> float:
    """How long `group` gets to serve: a worker hosting NeMo Gym servers serves once they
    answer, which NeMo Gym allows `Timeouts.nemo_gym_start`."""
    hosts = any(is_nemo_gym(function) for function in group.options.functions)
    return timeouts.worker_start + (timeouts.nemo_gym_start if hosts else 0.0)


async def stop_workers(supervised: Supervised | None, timeout: float) -> None:
    """Stop the supervised groups (see `Supervised.stop`); nothing if none were started."""
    if supervised is not None:
        await supervised.stop(timeout)
