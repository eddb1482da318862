"""The front as NeMo Gym starts it from a trainer's config (`front --from-nemo-gym`), without
NeMo Gym: the environment NeMo Gym gives each server process (`NEMO_GYM_CONFIG_DICT` with
every server's host and port, `NEMO_GYM_CONFIG_PATH` naming the front's own entry), made
here from the shipped `gymbus_front.yaml`, so GymBus's side of the trainer's path is
exercised in seconds: its workers supervised and scaled from the config, a bus named in
the config, and "no worker" answered at once. NeMo Gym's own `RunHelper().start` on the
same config is in test_nemo_gym_front.py.

Real processes throughout: `gym-runner front`, its `gym-runner serve` workers, nats-server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from bench._cluster import RUNNER
from gymbus import bus
from tests.fake_openai import free_port
from tests.vllm_stub import serve_stub

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
FRONT_CONFIG = (
    REPO
    / "runner"
    / "front"
    / "nemo_gym_root"
    / "resources_servers"
    / "gymbus"
    / "configs"
    / "gymbus_front.yaml"
)
WEATHER = "example_single_tool_call"
AGENT = f"{WEATHER}_simple_agent"
OWN = "gymbus_front"


def nemo_gym_config(**entry: Any) -> dict[str, Any]:
    """The shipped config as NeMo Gym resolves it for its servers: every server given a host
    and a free port; `entry` added to the front's own entry."""
    config = yaml.safe_load(FRONT_CONFIG.read_text())
    for block in config.values():
        ((_, implementations),) = block.items()
        ((_, instance),) = implementations.items()
        instance.update(host="127.0.0.1", port=free_port())
    config[OWN]["resources_servers"]["gymbus"].update(entry)
    return config


def port_of(config: dict[str, Any], name: str) -> int:
    ((_, implementations),) = config[name].items()
    ((_, instance),) = implementations.items()
    return int(instance["port"])


class StartedFront:
    """A `gym-runner front --from-nemo-gym` process with `config`; its output in `log`."""

    def __init__(self, config: dict[str, Any], work: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.log = work / "front.log"
        environ = {k: v for k, v in os.environ.items() if k != "NATS_URL"} | (env or {})
        environ |= {"NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config), "NEMO_GYM_CONFIG_PATH": OWN}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [*RUNNER, "front", "--from-nemo-gym"], env=environ, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 180) -> None:
        """Until its own port answers, as NeMo Gym waits for a server it started."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"the front exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"the front did not start:\n{self.output()}"
            try:
                urllib.request.urlopen(
                    f"http://127.0.0.1:{port_of(self.config, OWN)}/readyz", timeout=2
                ).close()
                return
            except OSError:
                time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def workers(self) -> list[psutil.Process]:
        """Its worker processes (`gym-runner serve`) alive now."""
        return [
            p
            for p in psutil.Process(self.process.pid).children()
            if "serve" in p.cmdline() and p.is_running()
        ]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextmanager
def started_front(
    config: dict[str, Any], work: Path, env: dict[str, str] | None = None
) -> Iterator[StartedFront]:
    front = StartedFront(config, work, env)
    try:
        front.wait_ready()
        yield front
    finally:
        front.stop()


def post_run(port: int, row: dict[str, Any], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/run",
        data=json.dumps(row).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def weather_rows(count: int) -> list[dict[str, Any]]:
    lines = (REPO / "examples" / f"{WEATHER}.jsonl").read_text().splitlines()
    return [
        {**json.loads(lines[i % len(lines)]), "agent_ref": {"name": AGENT}, "_rowidx": i}
        for i in range(count)
    ]


def test_a_function_that_crashes_on_import_answers_503_at_once_with_its_reason(tmp_path: Path) -> None:
    """Its workers are restarted a few times, then given up on, said in the front's log;
    the front still comes up, and a `/run` for an agent of theirs is a 503 naming why,
    within seconds (NeMo RL retries a 5xx as the infrastructure's)."""
    broken = tmp_path / "broken_tools.py"
    broken.write_text('raise RuntimeError("broken_tools cannot start: its data file is missing")\n')
    config = nemo_gym_config(serve=[WEATHER, AGENT, str(broken)], log_dir=str(tmp_path))
    with started_front(config, tmp_path) as front:
        asked = time.monotonic()
        status, body = post_run(port_of(config, AGENT), weather_rows(1)[0])
        answered = time.monotonic() - asked
        assert status == 503, body
        assert body["_ng_failure_class"] == "no_worker"
        assert "its data file is missing" in body["_ng_failure_message"], body
        assert answered < 10
        log = front.output()
        assert "exited 5 times in a row" in log and "its data file is missing" in log, log


def test_a_killed_worker_is_replaced_and_its_rollouts_come_back_once(tmp_path: Path) -> None:
    """The lone worker (agent, environment and policy in one process) is SIGKILLed with
    rollouts in flight: the front's log names its replacement, and every row is answered
    once, the killed ones redelivered."""
    stub_server = serve_stub()
    stub, url = next(stub_server)
    stub.delay = 1.0  # rollouts long enough to be in flight at the kill
    config = nemo_gym_config(workers=1, log_dir=str(tmp_path)) | {"policy_base_url": [url]}
    with contextlib.closing(stub_server), started_front(config, tmp_path) as front:
        (victim,) = front.workers()
        port = port_of(config, AGENT)
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = [pool.submit(post_run, port, row) for row in weather_rows(12)]
            time.sleep(1.0)
            victim.kill()
            results = [answer.result() for answer in answers]
        assert [status for status, _ in results] == [200] * 12, [body for _, body in results]
        assert sorted(body["_rowidx"] for _, body in results) == list(range(12))
        assert max(body["_gymbus"]["delivery"] for _, body in results) >= 2
        assert "replaced a worker process" in front.output()
        assert [p.pid for p in front.workers()] != [victim.pid]


async def wait_served(url: str, service: str) -> None:
    nc = await bus.connect(url, name="test")
    try:
        await bus.wait_served(nc, [service], timeout=120)
    finally:
        await nc.close()


async def tasks_run(url: str, agent: str) -> int:
    """The tasks every worker serving `agent` has taken, as its service's stats count them."""
    nc = await bus.connect(url, name="test")
    try:
        stats = await bus.service_stats(nc, agent, window=0.3)
    finally:
        await nc.close()
    return sum(e.num_requests for s in stats for e in s.endpoints if e.name == "tasks")


def test_the_front_joins_the_bus_its_config_names_and_a_separate_serve_takes_the_rows(
    nats_url: str, tmp_path: Path
) -> None:
    """`nats_url` in the config: the front starts no agent worker of its own (`workers: 0`
    for it), and a `gym-runner serve` started apart on the same bus runs every row: the
    tasks its agent service counts on the bus grow by as many."""
    config = nemo_gym_config(nats_url=nats_url, workers={AGENT: 0}, log_dir=str(tmp_path))
    log = open(tmp_path / "apart.log", "ab")
    apart = subprocess.Popen(
        [*RUNNER, "serve", AGENT],
        env={**os.environ, "NATS_URL": nats_url},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        asyncio.run(wait_served(nats_url, AGENT))  # none of the front's own serves it: a 503 until then
        with started_front(config, tmp_path) as front:
            assert all(AGENT not in p.cmdline() for p in front.workers())
            before = asyncio.run(tasks_run(nats_url, AGENT))
            results = [post_run(port_of(config, AGENT), row) for row in weather_rows(4)]
            assert [status for status, _ in results] == [200] * 4, results
            assert asyncio.run(tasks_run(nats_url, AGENT)) == before + 4
            assert front.process.poll() is None
    finally:
        apart.send_signal(signal.SIGTERM)
        apart.wait(30)
        log.close()


def test_a_front_stopped_while_its_workers_start_stops_at_once(tmp_path: Path) -> None:
    """NeMo Gym stops its servers with SIGINT and kills them a second later: a front still
    waiting for its workers (here ones that keep crashing) stops at once, its workers too."""
    broken = tmp_path / "broken_tools.py"
    broken.write_text('raise RuntimeError("broken_tools cannot start")\n')
    front = StartedFront(
        nemo_gym_config(serve=[WEATHER, AGENT, str(broken)], log_dir=str(tmp_path)), tmp_path
    )
    try:
        time.sleep(3.0)  # its workers are starting (and crashing)
        assert front.process.poll() is None, front.output()
        asked = time.monotonic()
        front.process.send_signal(signal.SIGINT)
        front.process.wait(10)
        took = time.monotonic() - asked
    finally:
        front.stop()
    assert took < 5, front.output()
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if str(broken) in " ".join(p.info["cmdline"] or [])
    ]
