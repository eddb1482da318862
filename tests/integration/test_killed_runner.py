"""`collect` killed with SIGKILL cannot clean up after itself: its embedded server dies with
it, and the next embedded server started removes the directory it left (JetStream's store)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from gymbus import bus
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT

pytestmark = pytest.mark.timeout(120)


def _server_dir_of(pid: int, deadline: float) -> Path:
    """The temporary directory of the embedded server `pid` started, once it serves."""
    while time.monotonic() < deadline:
        for work in Path(tempfile.gettempdir()).glob("gymbus-nats-*"):
            owner = work / "owner.pid"
            if owner.exists() and owner.read_text().strip() == str(pid) and list(work.glob("*.ports")):
                return work
        time.sleep(0.1)
    raise AssertionError(f"no embedded server of process {pid}")


def test_the_directory_a_killed_collect_left_is_removed_by_the_next_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    collect = subprocess.Popen(
        [sys.executable, "-m", "gymbus.runner", "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"),
         "-o", str(tmp_path / "o.jsonl"), "--agent", WEATHER_AGENT, "--num-repeats", "100000"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        work = _server_dir_of(collect.pid, time.monotonic() + 60)
        children = psutil.Process(collect.pid).children()
        server = next(child for child in children if child.name() == "nats-server")
    finally:
        collect.send_signal(signal.SIGKILL)
        collect.wait()
    server.wait(timeout=10)  # it dies with its parent
    assert work.exists()  # SIGKILL: nothing of collect ran to remove it

    with bus.EmbeddedServer():  # the next run's server
        assert not work.exists()
    for child in children:  # the workers die with their parent too, at once
        child.wait(timeout=5)
