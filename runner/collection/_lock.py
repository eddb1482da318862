"""One collection per output file: a lock beside it, held for the whole run.

Two runs appending to one output would write keys twice (each plans the whole input)
or wait on each other's results. The lock is `flock` on `<output>.lock`: the kernel
releases it when its process exits, however it exits, so a killed run leaves nothing
stuck. The file says who holds it (pid, host, start time, command), for the message a
second run prints. It works between processes that see the same filesystem with working
locks (one machine; most network filesystems).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from .._output import WriteFailed

__all__ = ["OutputInUse", "OutputLock"]


class OutputInUse(RuntimeError):
    """Another run holds the output file."""


class OutputLock:
    """Hold `<output>.lock` while writing `output`; `OutputInUse` at once if another run does."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.path = output.with_name(output.name + ".lock")
        self.fd: int | None = None

    def __enter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while self.fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise OutputInUse(
                    f"{self.output} is being written by another run ({holder}); wait for it to end or "
                    f"stop it (a run that is killed lets go of the file at once), or choose another --output"
                ) from None
            if _same_file(fd, self.path):
                self.fd = fd
            else:  # the run before us removed it after we opened it: lock the file there now
                os.close(fd)
        try:
            os.ftruncate(self.fd, 0)
            os.write(self.fd, _describe_this_process())
        except OSError as exc:  # a full disk: say which file, and hold nothing
            self.__exit__(None, None, None)
            raise WriteFailed(exc.errno, exc.strerror, str(self.path)) from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: nobody has it locked meanwhile
            os.close(self.fd)
            self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _describe_this_process() -> bytes:
    return json.dumps(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "command": shlex.join(["gym-runner", *sys.argv[1:]]),
        }
    ).encode()


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        return f"pid {info['pid']} on {info['host']}, started {info['started']}: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a run that has not said who it is yet"
