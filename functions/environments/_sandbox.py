"""Running untrusted Python in a bubblewrap sandbox.

A sandbox is a `bwrap` process that runs the harness (`_harness.py`) under the worker's
own Python interpreter, mounted read-only, with:

- **no network**: a new network namespace with only a loopback interface;
- **no worker secrets**: an empty environment, and a filesystem of only `/usr`, the
  system library directories, `/etc/ld.so.cache`, the Python runtime (all read-only), a
  fresh `/proc` and `/dev`, and a private size-limited tmpfs at `/tmp` (the working
  directory) that vanishes with the sandbox: the repository, home directories and the
  rest of `/etc` are absent, and everything but `/tmp` is read-only;
- **its own processes only**: new PID, IPC, UTS and (where possible) cgroup namespaces;
  every process a test starts is killed when the test ends, and every process of the
  sandbox when it closes, or when the worker dies (`--die-with-parent`);
- **no shared kernel channels**: a seccomp filter (`_seccomp`) refuses keyrings,
  tracing, BPF, perf events, userfaultfd, io_uring, new namespaces and mounts;
- **bounded resources**: a cgroup per sandbox (`_cgroups`) bounds the memory and the
  processes of everything in it together; per test, CPU seconds (RLIMIT_CPU), address
  space (RLIMIT_AS), stack and file size (RLIMIT_FSIZE); a wall-clock deadline after
  which the whole sandbox is killed.

**Without a cgroup** (no writable cgroup filesystem: an unprivileged container, say) a
sandbox cannot bound a group of processes, so each test is one process: a second seccomp
filter refuses new processes (threads are allowed), memory files and System V shared
memory, and the address-space limit bounds what the test holds. Code that forks fails
there (a runtime error), as it would on a judge that forbids it; `describe()` says which
mode a worker is in, and code_gen logs it when a worker starts.

Two ways to run, picked by who runs the worker:

- **root** (containers, CI): `bwrap` runs as root with no user namespace and keeps only
  CAP_SETUID/CAP_SETGID, which the harness uses to drop to a uid of the sandbox's own
  (`_uids`: leased, so no two live sandboxes on the host share one) before any submitted
  code runs.
- **unprivileged**: `bwrap` maps the user into a new user namespace (and forbids nested
  ones), which needs unprivileged user namespaces. All sandboxes then share the worker's
  uid outside their user and PID namespaces, which keep them from seeing or signalling
  each other; the seccomp filter refuses keyrings.

Submitted code gets the standard library only (`python -I -S`: no site-packages).
If `bwrap` or libseccomp is missing, or no sandbox can be made, `SandboxUnavailable` is
raised: code is never run any other way. `scripts/install-sandbox.sh` installs both.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymbus.schemas import SANDBOX_LIMITS, SandboxLimits

from ._cgroups import CgroupHome, SandboxCgroup
from ._seccomp import SANDBOX, SINGLE_PROCESS, SeccompUnavailable, filter_program
from ._uids import UidLease, lease_uid

__all__ = [
    "DEFAULT_SANDBOX_LIMITS",
    "INSTALL_HINT",
    "ProgramRun",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "describe",
    "open_sandbox",
]

log = logging.getLogger("gymbus.code_sandbox")

DEFAULT_SANDBOX_LIMITS = SANDBOX_LIMITS
INSTALL_HINT = "run scripts/install-sandbox.sh (as root: apt-get install bubblewrap libseccomp2)"
HARNESS = Path(__file__).with_name("_harness.py")
_INSIDE_UID = 65534  # the uid code sees in unprivileged mode (mapped to the worker's user)
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_MAX_HEADER_BYTES = 1 << 20
_STDERR_TAIL = 4096


class SandboxUnavailable(Exception):
    """No sandbox can be made here (bwrap or libseccomp missing, or not permitted);
    nothing was run."""


@dataclass(frozen=True)
class ProgramRun:
    """What one test's process did: its output and how it ended.

    `timed_out` means the wall-clock deadline passed and the sandbox was killed.
    Otherwise `exit_code` is the process's (negative: killed by that signal), and an
    exception the code raised is in `error` (its repr) and `traceback`.
    """

    output: str = ""
    exit_code: int = 0
    cpu_seconds: float = 0.0
    error: str | None = None
    traceback: str | None = None
    timed_out: bool = False


def _as_root() -> bool:
    return os.geteuid() == 0


def describe() -> tuple[bool, str]:
    """What sandboxes of this worker enforce, in one line, and whether every bound holds
    (`False`: no sandbox at all, or the one-process-per-test fallback)."""
    if shutil.which("bwrap") is None:
        return False, f"no sandbox: bubblewrap (`bwrap`) is not on PATH; {INSTALL_HINT}"
    try:
        filter_program(SANDBOX)
    except SeccompUnavailable as exc:
        return False, f"no sandbox: {exc}"
    who = "as root, a leased uid per sandbox" if _as_root() else "unprivileged, in a user namespace"
    home = CgroupHome.find()
    if home.parents:
        where = ", ".join(str(parent) for parent in home.parents)
        return True, f"bubblewrap {who}, seccomp filter, a cgroup v{home.version} per sandbox under {where}"
    fallback = "each test is one process (no fork, no memory files)"
    return False, f"bubblewrap {who}, seccomp filter; no cgroup can be made ({home.reason}): {fallback}"


def _runtime_dirs() -> list[str]:
    """The Python installation's directories, outside the system directories."""
    found: list[str] = []
    for prefix in (sys.base_prefix, sys.base_exec_prefix):
        path = os.path.realpath(prefix)
        if not any(path == d or path.startswith(d + "/") for d in (*_SYSTEM_DIRS, *found)):
            found.append(path)
    return found


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return [str(Path("/", *parts[: i + 1])) for i in range(len(parts))]


def _filesystem(limits: SandboxLimits) -> list[str]:
    """bwrap arguments for the sandbox's filesystem: system and runtime, read-only."""
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    made: set[str] = set()
    for path in [*(p for p in _SYSTEM_FILES if os.path.exists(p)), *_runtime_dirs()]:
        for parent in _parents(path):  # readable by the dropped uid (bwrap's default is 0700)
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(limits.scratch_bytes), "--tmpfs", "/tmp"]
    args += ["--perms", "0755", "--dir", "/sandbox", "--ro-bind", str(HARNESS), "/sandbox/harness.py"]
    return [*args, "--remount-ro", "/"]  # only /tmp stays writable


def bwrap_command(bwrap: str, limits: SandboxLimits, seccomp_fd: int) -> list[str]:
    """The full `bwrap ... python harness` command line for this worker."""
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session"]
    args += ["--clearenv", "--setenv", "LANG", "C.UTF-8", "--seccomp", str(seccomp_fd)]
    if _as_root():
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        uid = str(_INSIDE_UID)
        args += ["--unshare-user", "--disable-userns", "--uid", uid, "--gid", uid]
    args += _filesystem(limits)
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))  # not a venv's copy
    return [*args, "--chdir", "/tmp", "--", python, "-I", "-S", "-B", "/sandbox/harness.py"]


def _config(code: str, fn_name: str | None, limits: SandboxLimits, uid: int, one_process: bool) -> bytes:
    child_limits = {
        "cpu_seconds": max(1, math.ceil(limits.test_timeout)),
        "memory_bytes": limits.memory_bytes,
        "max_processes": limits.max_processes,
        "max_output_bytes": limits.max_output_bytes,
        "max_open_files": limits.max_open_files,
    }
    config: dict[str, Any] = {"code": code, "fn_name": fn_name, "uid": uid, "limits": child_limits}
    if one_process:
        config["test_filter"] = base64.b64encode(filter_program(SINGLE_PROCESS)).decode()
    return json.dumps(config).encode()


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def _processes_of(uid: int) -> list[int]:
    """Live processes on this host running as `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with suppress(OSError):
                status = Path(entry.path, "status").read_text()
                uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
                if str(uid) in uids.split()[1:] and "\nState:\tZ" not in status:
                    found.append(int(entry.name))
    return found


@dataclass
class _Holdings:
    """What a sandbox holds besides its process: a cgroup and a uid, given back on close."""

    group: SandboxCgroup | None = None
    lease: UidLease | None = None

    async def release(self, limits: SandboxLimits) -> None:
        """Remove the cgroup once empty, then free the uid once no process has it. A uid
        whose processes outlive the wait stays leased: it is never handed out again."""
        gone = True
        if self.group is not None:
            gone = await self.group.remove(limits.cleanup_timeout)
        elif self.lease is not None:
            gone = await _wait_for_no_processes(self.lease.uid, limits.cleanup_timeout)
        if not gone:
            log.error("a sandbox's processes outlived %.0f s after it was killed", limits.cleanup_timeout)
        elif self.lease is not None:
            self.lease.release()


async def _wait_for_no_processes(uid: int, timeout: float) -> bool:
    for _ in range(max(1, int(timeout / 0.01))):
        if not _processes_of(uid):
            return True
        await asyncio.sleep(0.01)
    return False


class Sandbox:
    """One running sandbox holding one submission; `run` executes one test in it.

    Make one with `open_sandbox`, which always kills it.
    """

    def __init__(self, process: asyncio.subprocess.Process, limits: SandboxLimits, held: _Holdings) -> None:
        self.process = process
        self.limits = limits
        self.held = held
        self.compile_error: str | None = None
        self._stderr = bytearray()
        self._drain = asyncio.create_task(self._keep_stderr_tail())

    @property
    def cgroup(self) -> SandboxCgroup | None:
        return self.held.group

    @property
    def uid(self) -> int:
        return self.held.lease.uid if self.held.lease is not None else _INSIDE_UID

    async def _keep_stderr_tail(self) -> None:
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-_STDERR_TAIL]

    async def _read_frame(self, limit: int) -> bytes:
        assert self.process.stdout is not None
        size = int.from_bytes(await self.process.stdout.readexactly(4), "big")
        if size > limit:
            raise ValueError(f"sandbox frame of {size} bytes exceeds {limit}")
        return await self.process.stdout.readexactly(size)

    async def _send(self, body: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(_frame(body))
        await self.process.stdin.drain()

    async def start(self, config: bytes) -> None:
        """Send the code; wait until it is compiled. `SandboxUnavailable` if bwrap fails."""
        try:
            await self._send(config)
            async with asyncio.timeout(self.limits.startup_timeout):
                reply: dict[str, Any] = json.loads(await self._read_frame(_MAX_HEADER_BYTES))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            raise SandboxUnavailable(f"the sandbox did not start: {await self._why(exc)}") from None
        except TimeoutError:
            raise SandboxUnavailable(
                f"the sandbox did not start within {self.limits.startup_timeout:g} s"
            ) from None
        if "fatal" in reply:
            raise SandboxUnavailable(f"the sandbox could not confine the code: {reply['fatal']}")
        self.compile_error = reply.get("compile_error")

    async def _why(self, exc: Exception) -> str:
        with suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.process.wait()
                await self._drain
        text = self._stderr.decode(errors="replace").strip()
        return text.splitlines()[-1] if text else f"{type(exc).__name__}: {exc}"

    async def run(self, test_input: str, timeout: float) -> ProgramRun:
        """Run the code on one test's input, within `timeout` wall-clock seconds.

        A sandbox that times out or breaks is killed; later calls report it timed out.
        """
        try:
            async with asyncio.timeout(timeout):
                await self._send(test_input.encode(errors="surrogatepass"))
                header: dict[str, Any] = json.loads(await self._read_frame(_MAX_HEADER_BYTES))
                output = await self._read_frame(self.limits.max_output_bytes)
        except TimeoutError:
            await self.close()
            return ProgramRun(timed_out=True)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            why = await self._why(exc)
            await self.close()
            return ProgramRun(exit_code=-signal.SIGKILL, error=f"the sandbox broke: {why}")
        return ProgramRun(
            output=output.decode(errors="replace"),
            exit_code=int(header.get("exit_code", 1)),
            cpu_seconds=float(header.get("cpu_seconds", 0.0)),
            error=header.get("error"),
            traceback=header.get("traceback"),
        )

    async def close(self) -> None:
        """Kill the sandbox and everything in it, wait until all of it is gone, and give
        back its cgroup and uid. Safe to call twice, and to cancel (it still finishes)."""
        await asyncio.shield(self._close())

    async def _close(self) -> None:
        if self.process.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.held.group is not None:
            self.held.group.kill()  # the PID namespace dies with bwrap; this is not left to chance
        await self.process.wait()
        self._drain.cancel()
        with suppress(asyncio.CancelledError):
            await self._drain
        await self.held.release(self.limits)


def _join(procs_files: tuple[bytes, ...]) -> None:
    """In the new process, before bwrap runs: join the sandbox's cgroup, so that nothing
    the sandbox ever starts is outside it. (Only system calls: the child of a threaded
    worker must not take locks.)"""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


async def _spawn(limits: SandboxLimits, held: _Holdings) -> asyncio.subprocess.Process:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (`bwrap`) is not on PATH: {INSTALL_HINT}")
    try:
        program = filter_program(SANDBOX)
    except SeccompUnavailable as exc:
        raise SandboxUnavailable(f"{exc}: {INSTALL_HINT}") from None
    join = None if held.group is None else held.group.procs_files()
    with os.fdopen(os.memfd_create("sandbox-seccomp"), "w+b") as seccomp:
        seccomp.write(program)
        seccomp.flush()
        seccomp.seek(0)
        try:
            return await asyncio.create_subprocess_exec(
                *bwrap_command(bwrap, limits, seccomp.fileno()),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={},  # nothing of the worker's environment, not even to bwrap itself
                start_new_session=True,  # its own process group, killed as one
                pass_fds=(seccomp.fileno(),),
                preexec_fn=None if join is None else lambda: _join(join),
                limit=1 << 20,
            )
        except OSError as exc:
            raise SandboxUnavailable(f"could not run bubblewrap: {exc}") from None


def _hold(limits: SandboxLimits) -> _Holdings:
    """A cgroup (where this worker can make one) and, as root, a uid for a new sandbox."""
    held = _Holdings()
    try:
        home = CgroupHome.find()
        if home.parents:
            held.group = home.create(limits.sandbox_memory_bytes, limits.max_processes)
        if _as_root():
            held.lease = lease_uid(limits.uid_base, limits.uid_count)
    except OSError as exc:
        if held.group is not None:
            held.group.remove_now()
        raise SandboxUnavailable(f"could not set up a sandbox: {exc}") from None
    return held


@asynccontextmanager
async def open_sandbox(
    code: str, fn_name: str | None, limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS
) -> AsyncIterator[Sandbox]:
    """A started sandbox holding `code` (check `compile_error`), killed on exit.

    `fn_name` set means tests call that function; unset means tests feed stdin and read
    stdout. It takes no slot: callers bound how many run at once (see `_turns`).
    """
    held = _hold(limits)
    try:
        process = await _spawn(limits, held)
    except BaseException:
        await held.release(limits)
        raise
    sandbox = Sandbox(process, limits, held)
    try:
        config = _config(code, fn_name, limits, sandbox.uid, held.group is None)
        await sandbox.start(config)
        yield sandbox
    finally:
        await sandbox.close()
