"""A real vLLM OpenAI-compatible server for tests, on the tiny model, on a free loopback port.

vLLM lives in its own virtual environment (`sh scripts/install-vllm.sh`; `$GYMBUS_VLLM_VENV`
or `.venv-vllm` at the repository root). The server runs as
`python -m vllm.entrypoints.openai.api_server` (the `vllm` command of the CPU build cannot
find its own version) with the Hermes tool parser (the tiny model's chat template writes
tool calls that way) and the regex steering logits processor (`tests/vllm_steering.py`).
Token ids and logprobs are asked for per request, as the `vllm` model function does.
Usage statistics are off and the hub is offline: nothing leaves the machine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from gymbus.bus import die_with_parent

__all__ = ["MODEL_NAME", "VllmServer", "vllm_python"]

ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "tiny-qwen2"
START_TIMEOUT = 300.0
"""Seconds to wait for the server to answer `/health` (about 20 s on two cores; much more
on a busy machine)."""


def vllm_python() -> Path | None:
    """The Python of the vLLM virtual environment, or `None` if vLLM is not installed there."""
    venv = Path(os.environ.get("GYMBUS_VLLM_VENV") or ROOT / ".venv-vllm")
    python = venv / "bin" / "python"
    installed = (venv / ".installed").exists()
    return python if installed and python.exists() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VllmServer:
    """One vLLM server process (and its engine and worker children, in its own process group)."""

    python: Path
    model_dir: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="gymbus-vllm-", suffix=".log")[1])
    )
    started_in: float = 0.0
    extra_args: list[str] = field(default_factory=list)
    """Flags added to the command (`--logprobs-mode processed_logprobs`, say)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Environment variables added to the server's (`VLLM_ALLOW_RUNTIME_LORA_UPDATING`, say)."""
    own_session: bool = True
    """Start the server in a session of its own. Linux's autogroup scheduler shares the CPU
    fairly between sessions first: a server in the test's session (`False`, a process group
    of its own still) competes with the test's trainer as one more process, instead of
    taking half the machine from it (measured: on two cores that lets generation run
    steps ahead of an asynchronous trainer)."""

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (`.../v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "32",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            "--logits-processors", "tests.vllm_steering:RegexSteering", "--seed", "0",
            # No torch.compile: starts in ~20 s instead of ~55 s, no slower on this model.
            "--enforce-eager", *self.extra_args,
        ]  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it answers; on failure, raise with its log's tail."""
        env = {
            **os.environ,
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # KV cache size in GiB; the tiny model needs a sliver of the default.
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "PYTHONPATH": str(ROOT),  # for the steering logits processor (tests/vllm_steering.py)
            **self.extra_env,
        }
        began = time.monotonic()
        with self.log_path.open("wb") as log:
            session = {"start_new_session": True} if self.own_session else {"process_group": 0}
            # Dies with the test process too, even one killed before its fixtures' teardown.
            # Only when started from the main thread: the signal comes when the thread that
            # started it ends, and a test that restarts a server from a thread of its own
            # would see the new server die as that thread returns (its fixtures stop it).
            on_main = threading.current_thread() is threading.main_thread()
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent if on_main else None,
                **session,
            )
        try:
            self._wait_ready(began + START_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began

    def _wait_ready(self, deadline: float) -> None:
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.root}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vLLM did not answer within {START_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def pids(self) -> list[int]:
        """The server's process and its children (engine core, worker)."""
        import psutil

        if self.process is None or self.process.poll() is not None:
            return []
        parent = psutil.Process(self.process.pid)
        return [parent.pid, *(child.pid for child in parent.children(recursive=True))]

    def kill(self) -> None:
        """SIGKILL the server's whole process group at once, as a crash would."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(os.getpgid(self.process.pid), signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after 20 s."""
        if self.process is None or self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        os.killpg(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(timeout=10)
        try:
            os.killpg(group, signal.SIGKILL)  # children the server left behind
        except ProcessLookupError:
            pass
