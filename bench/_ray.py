"""A Ray cluster of one's own, handed to NeMo Gym as NeMo RL hands it the one it runs in
(`+ray_head_node_address`), for runs of NeMo Gym's own stack: the NeMo RL test's, and the
census's, whose every `ng_run` joins one cluster instead of starting its own.

Ray gives a new node a fixed 30 s to register its agents; a busy machine misses that, so
the start is tried again. Token authentication is off (`RAY_AUTH_MODE=disabled`, in the
cluster's environment and in `RAY_ENVIRONMENT` for whatever joins it): the cluster listens on
loopback and only the caller's processes join it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.openai_stub import free_port

__all__ = ["RAY_ENVIRONMENT", "ray_cluster"]

RAY_ENVIRONMENT = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
START_TIMEOUT = 180.0


@contextmanager
def ray_cluster(ray: Path, tries: int = 3) -> Iterator[str]:
    """A Ray head node started with the `ray` binary of NeMo Gym's environment: its address
    (`127.0.0.1:<port>`). Stopped, with every process it started, on leaving."""
    folder = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths must fit 107 bytes
    log = folder / "start.log"
    try:
        for _ in range(tries):
            port = free_port()
            with open(log, "ab") as out:
                process = subprocess.Popen(
                    [str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                     f"--temp-dir={folder}", "--include-dashboard=false", "--disable-usage-stats"],
                    env={**os.environ, **RAY_ENVIRONMENT}, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            try:
                deadline = time.monotonic() + START_TIMEOUT
                while process.poll() is None and time.monotonic() < deadline:
                    if "Ray runtime started" in log.read_text(errors="replace"):
                        yield f"127.0.0.1:{port}"
                        return
                    time.sleep(1)
            finally:
                _stop(process)
        raise RuntimeError(f"Ray did not start in {tries} tries:\n{log.read_text(errors='replace')[-3000:]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The whole group at once: `ray start --block` was still running 10 s after a SIGTERM or
    a SIGINT, and the cluster (its folder removed after) holds nothing to save."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
