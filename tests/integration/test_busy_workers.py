"""Busy is not dead: a worker whose calls compute for long, on a machine whose cores are
all taken, keeps its connection and answers every call; no rollout starts over.

The environments (`busy_functions`) compute for 8 s per call in Python, or import a module
that does, longer than the bus's silence limit and the server's ping window together; a
function that did so on its worker's event loop lost the connection and every call in
flight with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from gymbus import bus
from gymbus.bus import Connection, environment_service, model_service
from gymbus.functions import Environment, MemoryState, Session, tool
from gymbus.functions.models.offline import offline_policy
from gymbus.schemas import SESSION, Response, ResponsesCreateParams, VerifyRequest, VerifyResult

from .busy_functions import BURN, BUSY

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = 32

pytestmark = pytest.mark.timeout(600)


class Note(msgspec.Struct):
    text: str


@tool
async def remember(args: Note, session: Session) -> str:
    await session.save(args)
    return threading.current_thread().name


async def judged_verify(request: VerifyRequest, session: Session) -> VerifyResult:
    note = await session.load(Note)
    judged = await session.generate("judge", ResponsesCreateParams(input="Is this right?"))
    on_loop_thread = threading.current_thread() is threading.main_thread()
    reward = float(note is not None and note.text == "kept" and bool(judged.output) and not on_loop_thread)
    return VerifyResult(reward=reward)


async def test_a_cpu_bound_environments_calls_run_off_the_loop_with_their_session(
    host: bus.ServiceHost, nc: Connection
) -> None:
    env = Environment("threaded", judged_verify, tools=(remember,), cpu_bound=True)
    await host.add(environment_service(env, MemoryState(), nc))
    await host.add(model_service("offline", "judge", offline_policy))
    headers = {SESSION: "s1"}
    tool_subject = bus.subjects.env_tool("threaded", "remember")
    thread = msgspec.json.decode(
        await bus.request(nc, tool_subject, b'{"text": "kept"}', timeout=30, headers=headers)
    )
    assert thread != threading.current_thread().name and thread.startswith("threaded")
    verify = bus.subjects.env_verify("threaded")
    response = Response(id="r", created_at=0.0, model="policy", output=[])
    request = VerifyRequest(responses_create_params=ResponsesCreateParams(input="q"), response=response)
    body = msgspec.json.encode(request)
    calls = (bus.request(nc, verify, body, timeout=30, headers=headers) for _ in range(8))
    replies = await asyncio.gather(*calls)
    assert [msgspec.json.decode(one)["reward"] for one in replies] == [1.0] * 8


@pytest.fixture
def cores_taken() -> Iterator[None]:
    """A process spinning on every core, for the whole test."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"the worker exited:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout:g} s"
        time.sleep(0.2)


def test_a_worker_computing_for_long_on_a_saturated_machine_loses_no_call(
    tmp_path: Path, cores_taken: None
) -> None:
    server = bus.EmbeddedServer(store_dir=tmp_path / "jetstream")
    url = server.start()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "NATS_URL": url, "PYTHONPATH": path}
    command = [sys.executable, "-m", "tests.integration.busy_functions"]
    rows = tmp_path / "busy.jsonl"
    agents = [agent for spec in BUSY for agent in spec.agents]
    with open(rows, "w") as f:
        for index in range(ROLLOUTS):
            row = {"responses_create_params": {"input": [{"role": "user", "content": f"task {index}"}]}}
            f.write(json.dumps({**row, "agent_ref": {"name": agents[index % len(agents)]}}) + "\n")
    worker_log = tmp_path / "worker.log"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with open(worker_log, "wb") as log:
            functions = [*(spec.name for spec in BUSY), *agents, "offline"]
            serve = [*command, "serve", *functions]
            worker = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
        processes.append(worker)
        _wait_for_line(worker_log, "ready:", worker, timeout=120)
        output = tmp_path / "out.jsonl"
        started = time.monotonic()
        collect = subprocess.run(
            [*command, "collect", "-i", str(rows), "-o", str(output)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        took = time.monotonic() - started
        logs = collect.stdout + collect.stderr + worker_log.read_text(errors="replace")
        assert collect.returncode == 0, logs
        written = [json.loads(line) for line in output.read_text().splitlines()]
        assert len(written) == ROLLOUTS
        assert all(row["reward"] == 1.0 for row in written)
        stats = [row["_gymbus"] for row in written]
        restarts = sum(one["restarts"] + one["call_retries"] + one["delivery"] - 1 for one in stats)
        assert restarts == 0, (restarts, worker_log.read_text(errors="replace")[-3000:])
        failures = output.with_name("out_failures.jsonl")
        assert not failures.exists() or not failures.read_text().strip()
        assert "lost the connection" not in worker_log.read_text(errors="replace")
        assert took > BURN  # the calls did compute for that long
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        server.stop()
