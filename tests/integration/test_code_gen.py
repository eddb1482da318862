"""`code_gen` over a real nats-server: the example rows with the offline policy, and
sandboxed verification of a scripted model's code through the bus."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path

import pytest

from gymbus import bus
from gymbus.bus import Connection, ServeOptions, environment_service, model_service, serve_functions, subjects
from gymbus.bus.hosting import run_rollout
from gymbus.functions import MemoryState
from gymbus.functions.environments._sandbox import describe
from gymbus.functions.registry import AGENTS, ENVIRONMENTS
from gymbus.schemas import (
    DEADLINE,
    SESSION,
    ContentPart,
    DeadlineExceeded,
    Item,
    Response,
    ResponsesCreateParams,
)
from tests.conftest import EXAMPLES
from tests.functions.test_code_sandbox import needs_sandbox, processes_with
from tests.integration.test_collect import read_jsonl, run_cli

AGENT = "code_gen_simple_agent"
ROW = json.dumps(
    {
        "responses_create_params": {"input": [{"role": "user", "content": "Read n, print n squared."}]},
        "verifier_metadata": {"unit_tests": {"inputs": ["3\n", "12\n"], "outputs": ["9\n", "144\n"]}},
        "hash_id": "square",
    }
).encode()


def test_the_example_rows_collect_with_the_offline_policy(tmp_path: Path) -> None:
    """Every row is collected and verified (what the scripted policy scores is not asserted)."""
    out = tmp_path / "code_gen.jsonl"
    done = run_cli("collect", "-i", str(EXAMPLES / "code_gen.jsonl"), "-o", str(out), "--agent", AGENT)
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert sorted(row["_ng_task_index"] for row in rows) == [0, 1, 2, 3, 4]  # type: ignore[type-var]
    for row in rows:
        assert 0.0 <= row["reward"] <= 1.0 and "error_type" in row
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": AGENT}
        assert row["dataset"] == "taco" and "unit_tests" in row["verifier_metadata"]  # type: ignore[operator]
    assert read_jsonl(tmp_path / "code_gen_failures.jsonl") == []


def scripted(code: str):  # type: ignore[no-untyped-def]
    """A model that always answers with `code` in a fenced block."""

    async def generate(params: ResponsesCreateParams) -> Response:
        text = f"Here is my solution:\n```python\n{code}\n```"
        message = Item(type="message", role="assistant", content=[ContentPart(type="output_text", text=text)])
        return Response(id="resp", created_at=0.0, model="scripted", output=[message])

    return generate


async def rollout(host: bus.ServiceHost, nc: Connection, code: str) -> dict[str, object]:
    await host.add(environment_service(ENVIRONMENTS["code_gen"], MemoryState()))
    await host.add(model_service("scripted", "policy", scripted(code)))
    row = await run_rollout(nc, AGENTS[AGENT], ROW, deadline=time.time() + 60)
    return json.loads(row)  # type: ignore[no-any-return]


@needs_sandbox
@pytest.mark.parametrize(
    ("code", "reward", "result"),
    [("print(int(input()) ** 2)", 1.0, [True, True]), ("print(int(input()) * 2)", 0.0, [-2])],
)
async def test_code_is_verified_in_the_sandbox_through_the_bus(
    host: bus.ServiceHost, nc: Connection, code: str, reward: float, result: list[object]
) -> None:
    row = await rollout(host, nc, code)
    assert (row["reward"], row["result"], row["extracted_model_code"]) == (reward, result, code)
    assert row["hash_id"] == "square" and "_ng_failure_class" not in row


async def test_without_a_sandbox_the_rollout_is_a_failure_row(
    host: bus.ServiceHost, nc: Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap here
    row = await rollout(host, nc, "print(int(input()) ** 2)")
    assert row["_ng_failure_class"] == "verify_failed" and row["reward"] == 0.0
    assert "bubblewrap" in str(row["_ng_failure_message"])


@needs_sandbox
async def test_the_callers_deadline_reaches_the_sandbox_through_the_bus(
    host: bus.ServiceHost, nc: Connection
) -> None:
    """The verify request's `Gym-Deadline` stops the sandbox: no work outlives the caller."""
    await host.add(environment_service(ENVIRONMENTS["code_gen"], MemoryState()))
    marker = f"late-{uuid.uuid4().hex}"
    code = f'import os, sys\nos.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])'
    text = f"```python\n{code}\n```"
    content = [{"type": "output_text", "text": text, "annotations": []}]
    response = {
        "id": "r",
        "created_at": 0,
        "model": "m",
        "output": [{"type": "message", "role": "assistant", "content": content}],
    }
    body = json.dumps(json.loads(ROW) | {"response": response}).encode()
    deadline = time.time() + 2.0
    headers = {SESSION: "s", DEADLINE: f"{deadline:.3f}"}
    with pytest.raises(DeadlineExceeded):
        await bus.request(nc, subjects.env_verify("code_gen"), body, timeout=10, headers=headers)
    assert time.time() - deadline < 1.0
    assert not processes_with(marker)


async def test_a_worker_says_what_its_sandbox_enforces_when_it_starts(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="gymbus.code_gen"):
        serving = asyncio.create_task(serve_functions(ServeOptions(functions=("code_gen",)), nats_url, stop))
        await asyncio.sleep(1.0)
        stop.set()
        await serving
    lines = [record.getMessage() for record in caplog.records if record.name == "gymbus.code_gen"]
    assert len(lines) == 1 and lines[0].startswith("code_gen sandbox: ")
    complete, line = describe()
    assert lines[0] == f"code_gen sandbox: {line}"
    assert caplog.records[0].levelno == (logging.INFO if complete else logging.WARNING)
