"""One NeMo Gym server process (a resources server or an agent): started by `_launcher.py`
in its virtual environment, live once its liveness route answers, and watched, so its
death is noticed at once.

Its output (NeMo Gym's own logging, tracebacks, refused requests) goes to a log file,
`<home>/logs/<server>-<pid>-<time>.log`, which every error about the server names; the
newest 20 of each server are kept.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from gymbus.schemas import DEFAULT_TIMEOUTS, UpstreamFailed

from ._venv import VirtualEnv, home, tool_path

__all__ = ["ServerInfo", "ServerProcess"]

_LAUNCHER = Path(__file__).with_name("_launcher.py")
_TAIL_LINES = 20
_KEPT_LOGS = 20


class ServerInfo(msgspec.Struct):
    """What the launcher reports once the server is built (its ready file)."""

    port: int
    pid: int
    cookie: str
    """The session cookie's name, NeMo Gym's `<ServerClass>___<instance name>`."""
    routes: list[str]
    """Paths of its POST routes (a resources server's tools among them)."""
    class_: str = msgspec.field(name="class")
    kind: str = "resources_servers"
    """NeMo Gym's kind of server: `resources_servers` or `responses_api_agents`."""
    verify_outputs: list[str] = msgspec.field(default_factory=lambda: ["reward"])
    """Fields its verify adds to the request (`reward`, `extracted_answer`, ...)."""


@dataclass
class ServerProcess:
    """The server `name` in directory `cwd`, run from `app` with `env.python`."""

    name: str
    env: VirtualEnv
    app: Path
    instance: str
    config: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    async def start(self, timeout: float = DEFAULT_TIMEOUTS.nemo_gym_start) -> ServerInfo:
        """Start the server and wait until it answers; `UpstreamFailed` naming the server
        and its log if it exits or stays silent for `timeout` seconds."""
        import yaml

        logs = home() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        ready = Path(tempfile.mkdtemp(prefix="gymbus-nemo-gym-")) / "ready.json"
        variables = {
            **os.environ,
            "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(self.config),
            "NEMO_GYM_CONFIG_PATH": self.instance,
            "PYTHONUNBUFFERED": "1",
            "PATH": tool_path(),
        }
        _forget_old_logs(logs, self.name)
        self.log = logs / f"{self.name}-{os.getpid()}-{int(time.time())}.log"
        self._spawn(ready, variables)
        try:
            info = await self._wait_ready(ready, timeout)
            await self._wait_live(info.port, time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            ready.unlink(missing_ok=True)
            ready.parent.rmdir()
        return info

    def _spawn(self, ready: Path, variables: dict[str, str]) -> None:
        assert self.log is not None
        with open(self.log, "wb") as out:
            # Its own process group, so stopping it stops whatever it started too.
            self.process = subprocess.Popen(
                [str(self.env.python), str(_LAUNCHER), str(self.app), str(ready)],
                cwd=self.app.parent, env=variables, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    async def _wait_ready(self, ready: Path, timeout: float) -> ServerInfo:
        deadline = time.monotonic() + timeout
        while not ready.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise self._failed(f"did not start within {timeout:.0f} s")
            await asyncio.sleep(0.05)
        return msgspec.json.decode(ready.read_bytes(), type=ServerInfo)

    async def _wait_live(self, port: int, deadline: float) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                self._check_alive()
                try:
                    async with http.get(
                        f"http://127.0.0.1:{port}/", timeout=aiohttp.ClientTimeout(total=2)
                    ) as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise self._failed("did not answer on its liveness route")
                await asyncio.sleep(0.05)

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise self._failed(f"exited with code {self.process.returncode}")

    def _failed(self, what: str) -> UpstreamFailed:
        return UpstreamFailed(f"NeMo Gym server {self.name} {what}; its log is {self.log}:\n{self.tail()}")

    def tail(self) -> str:
        """The last lines of the server's log."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-_TAIL_LINES:])

    async def wait(self) -> int:
        """The server's exit code, once it has exited."""
        while self.process is not None and self.process.poll() is None:
            await asyncio.sleep(0.2)
        return self.process.returncode if self.process is not None else 0

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the server (and what it started), SIGKILL after `grace` seconds."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()


def _forget_old_logs(logs: Path, name: str) -> None:
    """Keep the newest `_KEPT_LOGS` logs of server `name`: every start writes one."""
    found = sorted(logs.glob(f"{name}-*.log"), key=lambda path: path.stat().st_mtime, reverse=True)
    for old in found[_KEPT_LOGS:]:
        old.unlink(missing_ok=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
