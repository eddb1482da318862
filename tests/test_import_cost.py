"""Starting a worker imports no heavy library: each is loaded by the function that needs it.

Every `gym-runner serve` process imports the whole function registry, so a library
imported at module level (reasoning-gym pulls in matplotlib and SymPy, the `openai` SDK
pydantic) costs every worker start-up time and memory, even one serving only the weather
environment. These tests run a fresh interpreter, so what earlier tests imported does
not count.
"""

from __future__ import annotations

import json
import subprocess
import sys

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

SERVING = """
import json, sys
import gymbus.functions, gymbus.runner, gymbus.runner.cli, gymbus.runner.serving._serve
from gymbus.functions import AGENTS, MODELS, MemoryState, ModelOptions, find, names
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
from gymbus.functions import MODELS, ModelOptions
before = "openai" in sys.modules
generate = MODELS["openai"].make(ModelOptions(base_url="http://127.0.0.1:9/v1", model="m"))
print(json.dumps([before, type(generate).__name__, "openai" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == [False, "OpenAIModel", True]
