"""Starting a worker imports what it serves and no heavy library: each is loaded by the
function that needs it.

A library imported at module level (reasoning-gym pulls in matplotlib and SymPy, the
`openai` SDK pydantic) would cost every worker start-up time and memory, even one serving
only the weather environment; so would an environment's module imported by a worker that
does not serve it. These tests run fresh processes, so what earlier tests imported does not
count: a real `gym-runner serve` on a real nats-server, which writes out the modules it
imported when it exits (`WORKER`), and interpreters that look functions up.
"""

from __future__ import annotations

import asyncio
import json
import os
import pkgutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats.errors

from gymbus.bus import Connection, subjects
from gymbus.functions import environments

HEAVY = (
    # model adapters and HTTP
    "openai",
    "pydantic",
    "httpx",
    "httpx2",
    "anyio",
    # environments' libraries
    "reasoning_gym",
    "matplotlib",
    "numpy",
    "sympy",
    "mpmath",
    "math_verify",
    "nltk",
    "langdetect",
    "yaml",
    "xmltodict",
    "tomli_w",
    "openapi_schema_validator",
    "jsonschema",
    "trafilatura",
    "lxml",
    "dateutil",
    "pandas",
    # the trainer's libraries: only a trainer process that uses runner.BusRollouts loads them
    "torch",
    "trl",
    "transformers",
    "datasets",
    "accelerate",
)
"""Top-level modules no worker needs until one of its functions uses them."""

TYPER = {"pydantic"}
"""What the command line itself imports: typer (0.29) parses each argument with pydantic."""

SERVING = """
import json, sys
import gymbus.functions, gymbus.runner, gymbus.runner.cli, gymbus.runner.serving._serve
from gymbus.functions import MemoryState, ModelOptions
from gymbus.functions.registry import AGENTS, MODELS, find, names
from gymbus.bus import environment_service
names()
env = find("example_single_tool_call")
environment_service(env, MemoryState())
find("example_single_tool_call_simple_agent")
MODELS["offline"].make(ModelOptions())
find("openai")
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def imported_by(code: str) -> set[str]:
    """The top-level modules a fresh interpreter has imported after running `code`."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_importing_and_resolving_functions_loads_no_heavy_library() -> None:
    assert imported_by(SERVING) & set(HEAVY) == set()


def test_the_openai_adapter_loads_the_sdk_when_it_is_made() -> None:
    code = """
import json, sys
from gymbus.functions import ModelOptions
from gymbus.functions.registry import MODELS
before = "openai" in sys.modules
generate = MODELS["openai"].make(ModelOptions(base_url="http://127.0.0.1:9/v1", model="m"))
print(json.dumps([before, type(generate).__name__, "openai" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == [False, "OpenAIModel", True]


WEATHER = "example_single_tool_call"
ENVIRONMENTS = "gymbus.functions.environments"
ENVIRONMENT_MODULES = {
    module.name for module in pkgutil.iter_modules(environments.__path__) if not module.name.startswith("_")
}

WORKER = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "gym-runner"
runpy.run_module("gymbus.runner", run_name="__main__", alter_sys=True)
"""
"""`python -m gymbus.runner ARGS` (as `collect` starts a worker), writing the name of every
module it imported to the file given first when it exits. Not `-X importtime`: it misses
what `importlib.import_module` imports, as the registry does."""


async def _until_it_answers(nc: Connection, subject: str, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await nc.client.request(subject, b'{"city": "Rome"}', timeout=5)
            return
        except nats.errors.NoRespondersError:
            assert worker.poll() is None, f"the worker exited with code {worker.returncode}"
            assert time.monotonic() < deadline, "the worker did not serve within 60 s"
            await asyncio.sleep(0.1)


def _stopped(worker: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL after 30 s (a failed test leaves nothing running); the exit code."""
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.wait()


async def test_a_weather_worker_imports_no_other_environment(
    nats_url: str, nc: Connection, tmp_path: Path
) -> None:
    imported = tmp_path / "modules.json"
    command = [sys.executable, "-c", WORKER, str(imported), "serve", WEATHER]
    worker = subprocess.Popen(command, env={**os.environ, "NATS_URL": nats_url})  # noqa: ASYNC220 - a child to test, not awaited work
    try:
        await _until_it_answers(nc, subjects.env_tool(WEATHER, "get_weather"), worker)
    finally:
        code = await asyncio.to_thread(_stopped, worker)
    assert code == 0
    modules = json.loads(imported.read_text())  # a whole life: start, a tool call, the drain
    under = {name.split(".")[3] for name in modules if name.startswith(f"{ENVIRONMENTS}.")}
    assert under & ENVIRONMENT_MODULES == {WEATHER}  # the private helpers (`_settings`) are no environment
    assert {name.split(".")[0] for name in modules} & (set(HEAVY) - TYPER) == set()
