"""One run per output file, and a killed run leaves no lock behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gymbus.runner.collection._lock import OutputInUse, OutputLock

HOLD = "import sys; from pathlib import Path; from gymbus.runner.collection._lock import OutputLock; \
lock = OutputLock(Path(sys.argv[1])).__enter__(); print('held', flush=True); sys.stdin.read()"


def test_a_second_run_is_refused_at_once_and_told_who_holds_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with OutputLock(out), pytest.raises(OutputInUse) as refused:
        OutputLock(out).__enter__()
    message = str(refused.value)
    assert message.startswith(
        f"{out} is being written by another run (pid {os.getpid()} on {socket.gethostname()}"
    )
    assert ", started 2" in message and "gym-runner" in message
    assert not (tmp_path / "out.jsonl.lock").exists()  # removed when the run ends
    with OutputLock(out):  # and free again
        pass


def test_a_killed_run_does_not_leave_the_output_locked(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path.cwd()
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    with pytest.raises(OutputInUse, match=f"pid {holder.pid} "):
        OutputLock(out).__enter__()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / "out.jsonl.lock").exists()  # left behind by the killed run, but not held
    with OutputLock(out):
        pass
