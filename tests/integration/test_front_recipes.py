"""`gym-runner front` as a user starts it: the Unsloth recipe of docs/nemo-gym-clients.md
run as written (environments served with no agent, a front that names nothing, a
`/verify` found through the head server as Unsloth's notebooks find it, in plain HTTP),
and a front that waits: it says what it waits for, stops at once on SIGTERM, and refuses
a misspelt name at once with the names it is close to.

Real processes: a nats-server, `gym-runner serve`, `gym-runner front`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymbus import bus
from tests.conftest import EXAMPLES, WEATHER
from tests.fake_openai import free_port
from tests.processes import spawn, stop
from tests.test_docs import Command

pytestmark = pytest.mark.timeout(300)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
DOC = Path(__file__).resolve().parents[2] / "docs" / "nemo-gym-clients.md"
MCQA = "mcqa"


def unsloth_recipe() -> list[list[str]]:
    """The commands of the doc's Unsloth recipe, as written (comments and `&` dropped)."""
    section = DOC.read_text().split("Unsloth's notebooks run no agent", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the Unsloth recipe has no bash block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    return [words for line in lines for words in Command(str(DOC), "bash", line).segments()]


def as_here(words: list[str], port: int) -> list[str]:
    """A recipe's `gym-runner` command's arguments, on this test's free port (`spawn` gives
    it this test's bus: the recipe's `NATS_URL` and `--port 11000` are a reader's)."""
    return [str(port) if word == "11000" else word for word in words[1:]]


@pytest.fixture(scope="module")
def bus_url() -> Iterator[str]:
    server = bus.EmbeddedServer()
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


def wait_for(what: str, check: Any, process: subprocess.Popen[bytes], log: Path, within: float) -> Any:
    """`check()`'s first truthy answer, polled while `process` runs; fails after `within` s."""
    deadline = time.monotonic() + within
    while True:
        assert process.poll() is None, f"exited before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {within} s:\n{log.read_text()[-3000:]}"
        found = check()
        if found:
            return found
        time.sleep(0.2)


def head_config(port: int) -> dict[str, Any] | None:
    """The head server's config, read as Unsloth's notebooks read it (the YAML text as a JSON
    string), or `None` while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/global_config_dict_yaml", timeout=5) as reply:
            config: dict[str, Any] = yaml.safe_load(json.loads(reply.read()))
            return config
    except OSError:
        return None


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def verify_url(config: dict[str, Any], name: str) -> str:
    """`/verify` of resources server `name`, found as Unsloth's notebooks find it."""
    server = config[name]["resources_servers"][name]
    return f"http://{server['host']}:{server['port']}/verify"


def answered(row: dict[str, Any], text: str) -> dict[str, Any]:
    """`row` with a one-message `response` saying `text`, as Unsloth's reward function sends."""
    message = {"type": "output_text", "text": text, "annotations": []}
    response = {
        "id": "resp", "created_at": 0, "model": "policy", "object": "response",
        "output": [{"id": "msg", "role": "assistant", "type": "message", "status": "completed",
                    "content": [message]}],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip
    return {**row, "response": response}


def first_row(environment: str) -> dict[str, Any]:
    row: dict[str, Any] = json.loads((EXAMPLES / f"{environment}.jsonl").read_text().splitlines()[0])
    return row


@contextmanager
def recipe_front(url: str, work: Path) -> Iterator[dict[str, Any]]:
    """The recipe's processes on the bus at `url`, started in its order, its `--port` a free
    one; the head server's config once it answers. Stops them on the way out."""
    port = free_port()
    export, *commands = unsloth_recipe()
    assert export[0] == "export" and export[1].startswith("NATS_URL="), export
    assert [words[:2] for words in commands] == [["gym-runner", "serve"], ["gym-runner", "front"]], commands
    processes = []
    try:
        for words in commands:
            args = as_here(words, port)
            processes.append(spawn(args, url, work / f"{args[0]}.log"))
        front, log = processes[-1], work / "front.log"
        yield wait_for("head server", lambda: head_config(port), front, log, within=120)
    finally:
        for process in reversed(processes):
            stop(process)


@pytest.fixture(scope="module")
def unsloth_front(bus_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with recipe_front(bus_url, tmp_path_factory.mktemp("unsloth")) as config:
        yield config


def test_the_unsloth_recipe_as_written_verifies_through_the_head_server(
    unsloth_front: dict[str, Any],
) -> None:
    """Both environments of `gym-runner serve mcqa example_single_tool_call` are listed
    under their own names, and a `/verify` found there scores: mcqa's right letter 1, a
    wrong one 0; the answer is the request with the verdict set on it."""
    row = first_row(MCQA)
    right, wrong = f"\\boxed{{{row['expected_answer']}}}", "\\boxed{Z}"
    status, verified = post(verify_url(unsloth_front, MCQA), answered(row, right))
    assert status == 200 and verified["reward"] == 1.0
    assert verified["expected_answer"] == row["expected_answer"]  # the request, echoed
    assert verified["responses_create_params"] == row["responses_create_params"]
    assert verified["response"]["output"][0]["content"][0]["text"] == right
    assert post(verify_url(unsloth_front, MCQA), answered(row, wrong))[1]["reward"] == 0.0
    status, weather = post(verify_url(unsloth_front, WEATHER), answered(first_row(WEATHER), "cold"))
    assert status == 200 and weather["reward"] == 1.0


def test_seed_session_takes_an_empty_body(unsloth_front: dict[str, Any]) -> None:
    """NeMo Gym's `BaseSeedSessionRequest` declares no field: `{}` seeds a session."""
    server = unsloth_front[WEATHER]["resources_servers"][WEATHER]
    assert post(f"http://{server['host']}:{server['port']}/seed_session", {}) == (200, {})


def test_a_waiting_front_says_what_it_waits_for_and_stops_at_once(bus_url: str, tmp_path: Path) -> None:
    """Nothing served on its bus: the front says so at once, and SIGTERM ends its wait
    (it waited, silent and deaf to SIGTERM, for three minutes)."""
    log = tmp_path / "front.log"
    front = spawn(["front", "no_such_thing_yet", "--port", str(free_port())], bus_url, log)
    try:
        wait_for(
            "waiting line", lambda: "waiting for a live worker" in log.read_text(), front, log, within=60
        )
        assert "no_such_thing_yet" in log.read_text()
        front.send_signal(signal.SIGTERM)
        assert front.wait(5) == 0
    finally:
        stop(front)


def test_a_misspelt_agent_is_refused_at_once_with_the_nearest_name(bus_url: str, tmp_path: Path) -> None:
    misspelt = "example_single_tool_call_simple_agnet"
    done = subprocess.run(
        [*RUNNER, "front", misspelt, "--port", str(free_port())], capture_output=True, text=True, timeout=60,
        env={**os.environ, "NATS_URL": bus_url}, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "did you mean example_single_tool_call_simple_agent" in " ".join(done.stderr.split())
