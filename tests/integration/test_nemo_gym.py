"""NeMo Gym's own resources servers, hosted unchanged on the bus (`serve nemo-gym:<server>`).

Real NeMo Gym servers (the default release, 0.7.0) in their own virtual environments
(`sh scripts/install-nemo-gym.sh` builds them; without Python 3.13 they are skipped, except
in CI, where that is a failure), a real nats-server, real worker processes. Their agents:
tests/integration/test_nemo_gym_agents.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import msgspec
import psutil
import pytest
from rich.console import Console

from bench._cluster import Cluster
from gymbus import bus
from gymbus.functions.nemo_gym import SessionRecord, locate, prepare
from gymbus.runner import ProgressView, VerifyOptions, verify_rollouts
from gymbus.runner.collection._collect import CollectOptions, collect
from gymbus.schemas import (
    SESSION,
    BadRequest,
    ContentPart,
    GymError,
    Item,
    NoResponders,
    NotFound,
    Response,
    ResponsesCreateParams,
    SessionLost,
    input_items,
    item_text,
)

pytestmark = pytest.mark.timeout(900)

LIST = Path(__file__).with_name("nemo_gym_servers.txt")
LINES = [line.split() for line in LIST.read_text().splitlines() if line.strip() and not line.startswith("#")]
ROLES = [(server, agent, role) for server, agent, role, *_ in LINES]
ALSO_ON = {server: [extra.removeprefix("also:") for extra in more] for server, _, _, *more in LINES}
"""Other releases each server is tested on too."""
SERVERS = {server: agent for server, agent, _ in ROLES}
REVERIFIED = {server: agent for server, agent, role in ROLES if role == "reverify"}
REGRADED = {server: agent for server, agent, role in ROLES if role == "regraded"}
STATEFUL = next(server for server, _, role in ROLES if role == "stateful")
"""Keeps its state in the server process: re-verified in a fresh session it gives 0."""
JUDGED = next(server for server, _, role in ROLES if role == "judge")
CHAT_JUDGED = next(server for server, _, role in ROLES if role == "chat-judge")


@pytest.fixture(scope="module")
def servers() -> dict[str, Path]:
    """Each listed server's directory, its environment built (or found built)."""
    return built(SERVERS)


def built(names: Iterable[str]) -> dict[str, Path]:
    """Each of `names`' directory, its environment built (or found built); the test skips
    where they cannot be, and fails in CI."""
    try:
        for server in names:
            prepare(server)
        return {server: locate(server)[0] for server in names}
    except GymError as exc:
        message = f"NeMo Gym servers unavailable (`sh scripts/install-nemo-gym.sh`): {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI this is a failure, not a skip)")
        pytest.skip(message)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, ack_wait=3.0) as running:
        yield running


def start_worker(
    cluster: Cluster, *functions: str, log: str, timeout: float = 400, concurrency: int = 256, **env: str
) -> subprocess.Popen[bytes]:
    """A `gym-runner serve` process (`concurrency` rollouts at once); returns once it says it is ready."""
    path = cluster.workdir / log
    options = ["--ack-wait", str(cluster.ack_wait), "--concurrency", str(concurrency)]
    with open(path, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gymbus.runner", "serve", *functions, *options],
            env=cluster.env(**env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    cluster.processes.append(process)
    deadline = time.monotonic() + timeout
    while "ready: serving" not in path.read_text(errors="replace"):
        assert process.poll() is None, f"worker exited:\n{path.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"worker not ready:\n{path.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    return process


def quiet() -> ProgressView:
    return ProgressView(Console(file=io.StringIO()))


def launched_servers(worker: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The NeMo Gym server processes a worker started."""
    try:
        children = psutil.Process(worker.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child for child in children if "_launcher.py" in " ".join(child.cmdline())]


# --- NeMo Gym's stored rollouts, re-verified through the bridge ---


async def test_nemo_gyms_example_rollouts_reverify_with_their_stored_rewards(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    hosted = [*REVERIFIED, *REGRADED, STATEFUL]
    worker = start_worker(cluster, *(f"nemo-gym:{server}" for server in hosted), log="worker.log")
    assert len(launched_servers(worker)) == len(hosted)
    agreed = {}
    for server, agent in REVERIFIED.items():
        data = servers[server] / "data"
        options = VerifyOptions(
            input=data / "example_rollouts.jsonl", inputs=data / "example.jsonl", agent=agent,
            output=tmp_path / f"{server.replace('/', '_')}.jsonl", nats_url=cluster.url,
        )  # fmt: skip
        report = await verify_rollouts(options, quiet())
        stored = [
            json.loads(line)["reward"] for line in options.input.read_text().splitlines() if line.strip()
        ]
        assert report.failures == [] and report.disagreements == [], server
        assert report.join is not None and report.join.unmatched == 0, server
        assert (report.rows, report.agreed, report.disagreed, report.failed) == (
            len(stored),
            len(stored),
            0,
            0,
        )
        rescored = [json.loads(line)["reward"] for line in options.output.read_text().splitlines()]
        assert rescored == pytest.approx(stored), server
        agreed[server] = report.agreed
    assert len(agreed) >= 10 and all(count == 5 for count in agreed.values()), agreed

    # A verifier that reads more answers now than when NeMo Gym stored its rollouts: every
    # stored 1 is still 1; a stored 0 may have become 1 (mcqa: `\boxed{C: <option>}`).
    for server, agent in REGRADED.items():
        data = servers[server] / "data"
        options = VerifyOptions(
            input=data / "example_rollouts.jsonl", inputs=data / "example.jsonl", agent=agent,
            output=tmp_path / f"{server}.jsonl", nats_url=cluster.url,
        )  # fmt: skip
        report = await verify_rollouts(options, quiet())
        assert report.failures == [] and report.rows == 5 and report.agreed >= 3, server
        assert all((d.stored, d.new) == (0.0, 1.0) for d in report.disagreements), report.disagreements

    # A stateful server's rollout verified in a fresh session: NeMo Gym's own answer, 0.0
    # (its counter is not in the new session), never its state silently borrowed.
    data = servers[STATEFUL] / "data"
    options = VerifyOptions(
        input=data / "example_rollouts.jsonl", inputs=data / "example.jsonl", agent=SERVERS[STATEFUL],
        output=tmp_path / "stateful.jsonl", nats_url=cluster.url,
    )  # fmt: skip
    report = await verify_rollouts(options, quiet())
    assert (report.rows, report.failed) == (5, 0)
    assert [json.loads(line)["reward"] for line in options.output.read_text().splitlines()] == [0.0] * 5

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert launched_servers(worker) == []


# --- a stateful server, two replicas, one killed mid-run ---

REPEATS = 8
_ADD = re.compile(r"add (\d+)")


async def counting_policy(params: ResponsesCreateParams) -> Response:
    """A test policy that does what NeMo Gym's counter rows ask ("add 1 then add 2 then get the
    count"): each increment in turn, then read the counter, then answer with what it read.
    Slow enough that rollouts are in flight when a replica dies."""
    await asyncio.sleep(0.2)
    items = input_items(params)
    done = len([item for item in items if item.type == "function_call_output"])
    adds = [int(n) for n in _ADD.findall(" ".join(item_text(item) for item in items if item.role == "user"))]
    if done < len(adds):
        call = Item(
            type="function_call", name="increment_counter", arguments=json.dumps({"count": adds[done]})
        )
    elif done == len(adds):
        call = Item(type="function_call", name="get_counter_value", arguments="{}")
    else:
        answer = Item(type="message", role="assistant", content=str(items[-1].output))
        return Response(id="resp", created_at=time.time(), model="counting", output=[answer])
    call.call_id = call.id = f"call_{done}_{time.monotonic_ns()}"
    return Response(id="resp", created_at=time.time(), model="counting", output=[call])


@pytest.fixture
async def counting_model(cluster: Cluster) -> AsyncIterator[None]:
    nc = await bus.connect(cluster.url, name="counting policy")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("counting", "policy", counting_policy))
    yield
    await host.stop()
    await nc.close()


async def test_a_replica_killed_mid_run_loses_no_rollout_and_no_counter(
    servers: dict[str, Path], cluster: Cluster, counting_model: None, tmp_path: Path
) -> None:
    # NeMo Gym's own counter rows, each collected REPEATS times, on two replicas; four rollouts
    # at a time per worker, so the run goes in waves and the kill lands mid-run.
    rows_in = servers[STATEFUL] / "data" / "example.jsonl"
    tasks = len(rows_in.read_text().splitlines())
    planned = tasks * REPEATS
    replicas = [
        start_worker(cluster, f"nemo-gym:{STATEFUL}", log=f"replica-{n}.log", concurrency=4) for n in range(2)
    ]
    output = tmp_path / "counters.jsonl"
    options = CollectOptions(
        input=rows_in, output=output, agent=SERVERS[STATEFUL], num_repeats=REPEATS, nats_url=cluster.url
    )
    collection = asyncio.create_task(collect(options, quiet(), asyncio.Event()))
    while _lines(output) < planned // 4:
        assert not collection.done(), collection
        await asyncio.sleep(0.05)
    victim = replicas[0]
    its_servers = launched_servers(victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    written_at_kill = _lines(output)
    result = await asyncio.wait_for(collection, 300)

    assert written_at_kill <= planned // 2  # the kill landed while most rollouts were left
    assert psutil.wait_procs(its_servers, timeout=10)[1] == []  # its NeMo Gym server died with it
    assert (result.planned, result.written, result.failed) == (planned, planned, 0)
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    keys = sorted((row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows)
    assert keys == [(task, k) for task in range(tasks) for k in range(REPEATS)]  # none lost, none twice
    for row in rows:
        read = [
            json.loads(item["output"])
            for item in row["response"]["output"]
            if item["type"] == "function_call_output"
        ]
        # The counter the server kept for this rollout: seeded with `initial_count`, each
        # increment applied once, and read back as the row expects.
        assert read[-1] == {"count": row["expected_count"]}, row
        assert read[:-1] == [{"success": True}] * (len(read) - 1) and len(read) >= 2, row
        assert row["reward"] == 1.0
    stats = [row["_gymbus"] for row in rows]
    # Some rollouts ran again from a fresh seed: in the surviving worker (their session's state
    # died with the killed replica), or as tasks of the killed worker's agent, redelivered.
    assert sum(s["restarts"] + s["delivery"] - 1 for s in stats) > 0
    assert replicas[1].poll() is None


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# --- a server's judge is a model on the bus ---


class RecordingJudge:
    """A judge that records what it is asked and gives one verdict (by default: the
    answers are equal)."""

    def __init__(self, verdict: str = "Both answers are the same value. [[A=B]]") -> None:
        self.verdict = verdict
        self.prompts: list[str] = []

    async def __call__(self, params: ResponsesCreateParams) -> Response:
        self.prompts.append("\n".join(item_text(item) for item in input_items(params)))
        text = ContentPart(type="output_text", text=self.verdict, annotations=[])
        verdict = Item(type="message", id="msg_judge", status="completed", role="assistant", content=[text])
        return Response(id="resp_judge", created_at=time.time(), model="judge", output=[verdict])


async def test_a_servers_judge_calls_reach_the_model_served_on_the_bus(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    judge = RecordingJudge()
    nc = await bus.connect(cluster.url, name="judge")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("judge", "policy", judge))
    try:
        start_worker(
            cluster, f"nemo-gym:{JUDGED}", log="judged.log",
            GYMBUS_MATH_WITH_JUDGE=json.dumps({"should_use_judge": True}),
        )  # fmt: skip
        data = servers[JUDGED] / "data"
        # NeMo Gym's first example rollout: a wrong fraction (83/499 for 333/1997), which
        # math-verify rejects, so the server asks its judge, in both orders.
        first = data.joinpath("example_rollouts.jsonl").read_text().splitlines()[0]
        (tmp_path / "first.jsonl").write_text(first + "\n")
        options = VerifyOptions(
            input=tmp_path / "first.jsonl", inputs=data / "example.jsonl", agent=SERVERS[JUDGED],
            output=tmp_path / "judged.jsonl", nats_url=cluster.url,
        )  # fmt: skip
        report = await verify_rollouts(options, quiet())
    finally:
        await host.stop()
        await nc.close()
    assert (report.rows, report.failed) == (1, 0)
    row = json.loads(options.output.read_text())
    assert row["library_reward"] == 0.0 and row["reward"] == 1.0  # the judge's verdict decided
    assert len(judge.prompts) == len(row["judge_evaluations"]) == 2
    # Both answers in each prompt (0.4.0 shows the extracted `83/499`, 0.7.0 the boxed `\frac{83}{499}`).
    assert all(all(number in prompt for number in ("333", "1997", "83", "499")) for prompt in judge.prompts)


async def test_a_verify_whose_judge_nobody_serves_fails_at_once_naming_it(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    settings = {
        "should_use_judge": True,
        "judge_model_server": {"type": "responses_api_models", "name": "judge_model"},
    }
    start_worker(cluster, f"nemo-gym:{JUDGED}", log="judged.log", GYMBUS_MATH_WITH_JUDGE=json.dumps(settings))
    data = servers[JUDGED] / "data"
    # The first stored rollout is wrong for math-verify, so the server asks its judge.
    (tmp_path / "first.jsonl").write_text(
        data.joinpath("example_rollouts.jsonl").read_text().splitlines()[0] + "\n"
    )

    def options(name: str) -> VerifyOptions:
        return VerifyOptions(input=tmp_path / "first.jsonl", inputs=data / "example.jsonl", agent=SERVERS[JUDGED],
                             output=tmp_path / f"{name}.jsonl", nats_url=cluster.url)  # fmt: skip

    began = time.monotonic()
    report = await verify_rollouts(options("unserved"), quiet())
    # At once: not after the bus's minute of retries for a model that may yet come up.
    assert time.monotonic() - began < 20
    assert (report.rows, report.failed) == (1, 1)
    failure = json.loads(tmp_path.joinpath("unserved_failures.jsonl").read_text())
    assert failure["_ng_failure_class"] == "judge_failed"
    assert "no model serves `judge_model`" in failure["_ng_failure_message"]

    # Served under that name too (one flag), the policy judges.
    start_worker(cluster, "offline", "--served-model", "policy,judge_model", log="judge.log")
    report = await verify_rollouts(options("served"), quiet())
    assert (report.rows, report.failed) == (1, 0)
    assert json.loads(tmp_path.joinpath("served.jsonl").read_text())["judge_evaluations"]  # it was asked


async def test_a_server_that_judges_with_chat_completions_at_the_policy_url_gets_its_verdicts(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    # verifif's config reaches its judge as `${policy_base_url}`, with Chat Completions.
    judge = RecordingJudge("The response follows the instruction. [[YES]]")
    nc = await bus.connect(cluster.url, name="judge")
    host = bus.ServiceHost(nc)
    await host.add(bus.model_service("judge", "policy", judge))
    try:
        start_worker(cluster, f"nemo-gym:{CHAT_JUDGED}", log="chat.log")
        data = servers[CHAT_JUDGED] / "data"
        (tmp_path / "first.jsonl").write_text(
            data.joinpath("example_rollouts.jsonl").read_text().splitlines()[0] + "\n"
        )
        options = VerifyOptions(
            input=tmp_path / "first.jsonl", inputs=data / "example.jsonl", agent=SERVERS[CHAT_JUDGED],
            output=tmp_path / "judged.jsonl", nats_url=cluster.url,
        )  # fmt: skip
        report = await verify_rollouts(options, quiet())
    finally:
        await host.stop()
        await nc.close()
    assert (report.rows, report.failed) == (1, 0)
    row = json.loads(options.output.read_text())
    judged = [result for result in row["validation_results"] if "llm_judge" in json.dumps(result)]
    assert judge.prompts and len(judge.prompts) == len(judged)
    assert not any("Judge unavailable" in json.dumps(result) for result in row["validation_results"])


# --- a user's own server directory, and calls that must fail loudly ---

OWN_SERVER = """
from fastapi import FastAPI
from pydantic import BaseModel

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer,
)


class LengthRequest(BaseModel):
    text: str


class LengthVerifyRequest(BaseVerifyRequest):
    expected_length: int


class TextLengthServer(SimpleResourcesServer):
    config: BaseResourcesServerConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/length")(self.length)
        return app

    async def length(self, body: LengthRequest) -> dict:
        return {"length": len(body.text)}

    async def verify(self, body: LengthVerifyRequest) -> BaseVerifyResponse:
        said = [item.output for item in body.response.output if item.type == "function_call_output"]
        reward = float(any(f'"length":{body.expected_length}' in text for text in said))
        return BaseVerifyResponse(**body.model_dump(), reward=reward)


if __name__ == "__main__":
    TextLengthServer.run_webserver()
"""


def server_dir(root: Path, name: str, app: str) -> Path:
    """A resources server laid out as NeMo Gym lays out its own."""
    directory = root / "resources_servers" / name
    (directory / "configs").mkdir(parents=True)
    (directory / "app.py").write_text(app)
    (directory / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../\n")
    (directory / "configs" / f"{name}.yaml").write_text(
        f"{name}:\n  resources_servers:\n    {name}:\n      entrypoint: app.py\n      domain: other\n"
    )
    return directory


def verify_body(expected: int, said: str) -> bytes:
    output = [
        {"type": "function_call", "name": "length", "arguments": '{"text": "hello"}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": said},
    ]
    response = {"id": "r", "created_at": 1.0, "model": "m", "object": "response", "output": output}
    return json.dumps(
        {"responses_create_params": {"input": "hello"}, "response": response, "expected_length": expected}
    ).encode()


async def test_a_users_own_server_is_hosted_and_bad_calls_fail_loudly(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    own = server_dir(tmp_path, "text_length", OWN_SERVER)
    worker = start_worker(cluster, f"nemo-gym:{own}", log="own.log")
    nc = await bus.connect(cluster.url, name="test")
    tool, seed = bus.subjects.env_tool("text_length", "length"), bus.subjects.env_seed("text_length")
    try:
        # A tool call in a session nobody seeded: an error, never a silent fresh session.
        with pytest.raises(NotFound, match="never seeded"):
            await bus.request(nc, tool, b'{"text": "hello"}', timeout=30, headers={SESSION: "unseeded"})
        headers = {SESSION: "s1"}
        await bus.request(
            nc, seed, b'{"responses_create_params": {"input": "x"}}', timeout=30, headers=headers
        )
        assert json.loads(await bus.request(nc, tool, b'{"text": "hello"}', timeout=30, headers=headers)) == {
            "length": 5
        }
        # The server's 422, as a readable error naming the field.
        with pytest.raises(BadRequest, match=r"422.*field `text`"):
            await bus.request(nc, tool, b'{"text": 5}', timeout=30, headers=headers)
        verdict = await bus.request(nc, bus.subjects.env_verify("text_length"), verify_body(5, '{"length":5}'),
                                    timeout=30, headers=headers)  # fmt: skip
        assert json.loads(verdict)["reward"] == 1.0
        # A session whose replica is gone: lost, loudly (its rollout would start again).
        sessions = await bus.hosting.KvSessions.open(nc, "text_length")
        await sessions.put("s2", msgspec.json.encode(SessionRecord(replica="gone0000", cookie=None)))
        with pytest.raises(SessionLost, match="gone"):
            await bus.request(nc, tool, b'{"text": "hello"}', timeout=30, headers={SESSION: "s2"})
        # The server crashes: its replica stops serving at once, and the worker exits saying so.
        (server,) = launched_servers(worker)
        server.kill()
        assert await asyncio.to_thread(worker.wait, 60) == 1
        said = " ".join((cluster.workdir / "own.log").read_text().split())
        assert "NeMo Gym server text_length exited with code -9; its log is" in said
        with pytest.raises(NoResponders):
            await bus.request(nc, seed, b'{"responses_create_params": {"input": "x"}}', timeout=5)
    finally:
        await nc.close()


def test_a_server_that_cannot_start_is_named_with_its_log(
    servers: dict[str, Path], cluster: Cluster, tmp_path: Path
) -> None:
    broken = server_dir(tmp_path, "broken", 'raise RuntimeError("this server cannot start")\n')
    done = subprocess.run(
        [sys.executable, "-m", "gymbus.runner", "serve", f"nemo-gym:{broken}"],
        env=cluster.env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "NeMo Gym server broken exited with code 1" in said
    log = re.search(r"its log is (\S+?\.log)", said)
    assert log is not None and "this server cannot start" in Path(log[1]).read_text()
