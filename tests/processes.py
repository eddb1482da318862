"""`gym-runner` processes a test starts on a bus, and stops: the one place tests spawn them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

RUNNER = [sys.executable, "-m", "gymbus.runner"]


def spawn(args: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    """`gym-runner ARGS` on the bus at `url` (no policy endpoint from the caller's
    environment), its output appended to `log`."""
    env = {k: v for k, v in os.environ.items() if k != "POLICY_BASE_URL"} | {"NATS_URL": url}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*RUNNER, *args], env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still there 30 s later."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
