"""An agent written by hand, in a file of its own, served with `gym-runner serve FILE` on a
shared bus and collected with `gym-runner collect`, as an author runs it: what it gets
wrong is a failure row naming it, and what it passes to the model reads as the tool's error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

RUNNER = [sys.executable, "-m", "gymbus.runner"]

ENVIRONMENT = '''
"""A shelf whose `remove` tool finds nothing to remove."""

from msgspec import Struct

from gymbus.functions import Environment, NotFound, Session, VerifyRequest, VerifyResult, tool


class Thing(Struct, kw_only=True):
    name: str


async def remove(args: Thing, session: Session) -> Thing:
    raise NotFound(f"no {args.name} on the shelf")


async def verify(request: VerifyRequest, session: Session) -> VerifyResult:
    return VerifyResult(reward=1.0)


ENVIRONMENT = Environment(name="shelf", tools=(tool(remove),), verify=verify)
'''

AGENTS = '''
"""Two agents of my own: one tells the model what a tool said, one forgets the response."""

import json

import msgspec
from shelf_env import ENVIRONMENT

from gymbus.functions import Agent, Calls, GymError, Item, Response


async def tells_the_model(row: bytes, calls: Calls, max_steps: int) -> bytes:
    call = Item(type="function_call", id="fc_0", call_id="call_0", name="remove", arguments='{"name": "jam"}')
    try:
        output = await calls.tool("remove", call.arguments)
    except GymError as exc:
        output = json.dumps({"error": str(exc)})
    told = Item(type="function_call_output", call_id="call_0", output=output)
    response = Response(id="resp_0", created_at=0, model="mine", output=[call, told])
    verdict = msgspec.json.decode(await calls.verify(row, response))
    return msgspec.json.encode({**msgspec.json.decode(row), **verdict, "response": response})


async def forgets_the_response(row: bytes, calls: Calls, max_steps: int) -> bytes:
    response = Response(id="resp_0", created_at=0, model="mine", output=[])
    return await calls.verify(row, response)  # the verdict alone, not the row with it


TELLS = Agent(name="tells_agent", rollout=tells_the_model, environment=ENVIRONMENT.name)
FORGETS = Agent(name="forgets_agent", rollout=forgets_the_response, environment=ENVIRONMENT.name)
'''


def _row(agent: str) -> str:
    return json.dumps({"responses_create_params": {"input": "Remove the jam."}, "agent_ref": {"name": agent}})


def _served(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        worker = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "ready:" not in log.read_text(errors="replace"):
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            raise AssertionError(f"serve did not get ready:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)
    return worker


def test_a_hand_written_agents_mistakes_are_failures_and_its_tool_errors_carry_no_subject(
    nats_url: str, tmp_path: Path
) -> None:
    (tmp_path / "shelf_env.py").write_text(textwrap.dedent(ENVIRONMENT))
    (tmp_path / "shelf_agents.py").write_text(textwrap.dedent(AGENTS))
    (tmp_path / "rows.jsonl").write_text(_row("tells_agent") + "\n" + _row("forgets_agent") + "\n")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("NATS_", "POLICY_"))}
    env["NATS_URL"] = nats_url
    worker = _served(
        [*RUNNER, "serve", "shelf_env.py", "shelf_agents.py"], tmp_path, env, tmp_path / "serve.log"
    )
    try:
        done = subprocess.run([*RUNNER, "collect", "-i", "rows.jsonl", "-o", "out/r.jsonl"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=90)  # fmt: skip
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert done.returncode == 3, done.stderr  # one rollout, one failure: not "mean reward 1.000", exit 0
    [rollout] = [json.loads(line) for line in (tmp_path / "out" / "r.jsonl").read_text().splitlines()]
    told = rollout["response"]["output"][-1]["output"]
    assert json.loads(told) == {"error": "no jam on the shelf"}, told  # no [gym.env.shelf.tool.remove]
    [failure] = [
        json.loads(line) for line in (tmp_path / "out" / "r_failures.jsonl").read_text().splitlines()
    ]
    assert failure["_ng_failure_class"] == "agent_failed"
    assert failure["_ng_failure_message"].startswith("agent forgets_agent returned a row without `response`")
    assert failure["responses_create_params"] == {"input": "Remove the jam."}  # the task row, named
    assert "agent_failed: 1 (first: agent forgets_agent returned a row without `response`" in done.stderr
