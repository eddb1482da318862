"""P13: NeMo Gym's own `ng_collect_rollouts` collecting weather rollouts two ways.

The same rows (`examples/example_single_tool_call.jsonl`, repeated), the same agent name
(`example_single_tool_call_simple_agent`) and the same mock model (`bench.openai_stub`'s
Responses API at 0 ms, the offline policy's answers: one `get_weather` call, then a reply),
collected by NeMo Gym 0.7.0's unmodified `ng_collect_rollouts` from its own environment:

- gymbus: against `gym-runner front`, the rows' `/run`s becoming tasks on the bus, run by a
  `gym-runner serve` worker (GymBus's weather environment, its simple agent, and the
  `openai` adapter calling the stub);
- nemo_gym: against NeMo Gym's own servers started by `ng_run` (the weather resources server,
  `simple_agent`, the `legacy_agent` environment server, `openai_model` calling the stub),
  each in the environment GymBus built for it from the same requirements.

Both stacks stay up, and the collections alternate. A side's CPU is that of every process
of its stack over its collection (gymbus: nats-server, the worker, the front; nemo_gym:
`ng_run` and everything it started); `ng_collect_rollouts`' own CPU is the client's, the same
program on both sides, reported apart. The stub serves both sides and is counted on neither.
The rate runs from the stub's first model call to the last rollout written, so the
client's start (importing NeMo Gym) is left out on both sides.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from bench._procs import EXAMPLE, RUNNER, WEATHER, WEATHER_AGENT, Fleet, count_lines, cpu_seconds, stop_ng_run
from bench.openai_stub import OpenAIStub, StubServer, free_port
from gymbus.functions.nemo_gym import requirements_of, virtual_env
from gymbus.functions.nemo_gym._venv import VirtualEnv, pinned

__all__ = [
    "SIDES",
    "FrontCollection",
    "link_environments",
    "own_weather_stack",
    "p13_front_rollouts",
    "wait_answers",
]

SIDES = ("gymbus", "nemo_gym")
POLL = 0.05
"""Seconds between two looks at the stub's calls and the output's rows while a side collects."""
START_TIMEOUT = 300.0
"""Seconds either stack gets to start (`ng_run` starts Ray and four servers)."""
STARTS = 5
"""Tries `ng_run` gets: Ray gives its raylet a fixed 30 s to register, which a busy machine
can miss."""


@dataclass
class FrontCollection:
    """One `ng_collect_rollouts` run against one side."""

    side: str
    rollouts: int
    seconds: float
    """From the first model call to the last rollout written."""
    side_cpu: float
    """CPU seconds of the side's processes over the run."""
    client_cpu: float
    """CPU seconds of `ng_collect_rollouts` itself."""

    @property
    def rate(self) -> float:
        return self.rollouts / self.seconds

    @property
    def cpu_per_thousand(self) -> float:
        return self.side_cpu / self.rollouts * 1000

    @property
    def client_cpu_per_thousand(self) -> float:
        return self.client_cpu / self.rollouts * 1000


def p13_front_rollouts(rollouts: int, rounds: int, work: Path) -> list[FrontCollection]:
    """`rounds` alternations of `rollouts` weather rollouts, GymBus first in each."""
    work.mkdir(parents=True, exist_ok=True)
    nemo_gym = virtual_env([pinned()], "NeMo Gym")
    rows = _rows(work / "weather.jsonl", rollouts)
    stub = StubServer(OpenAIStub())
    stub_url = stub.start()
    runs = []
    try:
        with Fleet() as fleet, _OwnStack(nemo_gym, stub_url, work) as own:
            model = ["openai", "--model-url", stub_url, "--model", "stub", "--model-api", "responses"]
            fleet.spawn([*RUNNER, "serve", WEATHER, WEATHER_AGENT, *model, "--concurrency", "1024"])
            head = free_port()
            front = fleet.spawn([*RUNNER, "front", WEATHER_AGENT, "--port", str(head)], ready=None)
            wait_answers(head, front)
            heads = {"gymbus": head, "nemo_gym": own.head}
            stacks = {"gymbus": lambda: _with_children(fleet.processes()), "nemo_gym": own.processes}
            for round_ in range(rounds):
                for side in SIDES:
                    output = work / f"{side}-{round_}.jsonl"
                    stack = stacks[side]()
                    runs.append(_collect(side, nemo_gym, heads[side], stack, stub.stub, rows, output))
    finally:
        stub.stop()
    return runs


def wait_answers(port: int, front: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if front.poll() is not None:
            raise RuntimeError(f"gym-runner front exited ({front.returncode})")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"gym-runner front did not answer in {START_TIMEOUT:.0f} s") from None
            time.sleep(0.2)


def _with_children(processes: list[psutil.Process]) -> list[psutil.Process]:
    found = list(processes)
    for process in processes:
        try:
            found += process.children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return found


def _rows(path: Path, count: int) -> Path:
    lines = [line for line in EXAMPLE.read_text().splitlines() if line.strip()]
    path.write_text("".join(lines[i % len(lines)] + "\n" for i in range(count)))
    return path


def _collect(
    side: str, nemo_gym: VirtualEnv, head: int, stack: list[psutil.Process], stub: OpenAIStub,
    rows: Path, output: Path,
) -> FrontCollection:  # fmt: skip
    expected = count_lines(rows)
    command = [
        str(nemo_gym.python.parent / "ng_collect_rollouts"), f"+input_jsonl_fpath={rows}",
        f"+output_jsonl_fpath={output}", f"+agent_name={WEATHER_AGENT}",
        "+head_server.host=127.0.0.1", f"+head_server.port={head}",
    ]  # fmt: skip
    served_before = stub.served
    cpu_before = cpu_seconds(stack)
    log = output.with_suffix(".log")
    with open(log, "wb") as out:
        client = subprocess.Popen(
            command, cwd=output.parent, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )  # fmt: skip
    first_call = last_line = 0.0
    lines = 0
    deadline = time.monotonic() + 600
    while True:
        pid, status, usage = os.wait4(client.pid, os.WNOHANG)
        now = time.monotonic()
        if not first_call and stub.served > served_before:
            first_call = now
        written = count_lines(output)
        if written > lines:
            lines, last_line = written, now
        if pid:
            client.returncode = os.waitstatus_to_exitcode(status)
            break
        if now > deadline:
            client.kill()
            client.wait()
            raise RuntimeError(f"ng_collect_rollouts against {side} did not finish in 600 s; see {log}")
        time.sleep(POLL)
    side_cpu = cpu_seconds(stack) - cpu_before
    if client.returncode != 0 or lines != expected:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(
            f"ng_collect_rollouts against {side} wrote {lines} of {expected} rollouts "
            f"(exit status {client.returncode}):\n{tail}"
        )
    # The first call and the last row are seen a poll apart at best: a run shorter than one
    # poll (a few rows on a quick side) is timed as one poll, never as no time at all.
    seconds = max(last_line - first_call, POLL)
    return FrontCollection(side, lines, seconds, side_cpu, usage.ru_utime + usage.ru_stime)


def own_weather_stack(tree: Path) -> tuple[list[Path], list[Path]]:
    """NeMo Gym's own servers for weather rollouts in its package `tree` (the weather
    resources server, `simple_agent`, the `legacy_agent` environment server, `openai_model`),
    and the configs that list them."""
    servers = [
        tree / "resources_servers" / WEATHER,
        tree / "responses_api_agents" / "simple_agent",
        tree / "environment_servers" / "legacy_agent",
        tree / "responses_api_models" / "openai_model",
    ]
    configs = [
        tree / "resources_servers" / WEATHER / "configs" / f"{WEATHER}.yaml",
        tree / "responses_api_models" / "openai_model" / "configs" / "openai_model.yaml",
    ]
    return servers, configs


def link_environments(servers: list[Path], root: Path) -> Path:
    """A tree `root/<kind>/<name>/.venv` of links to the environments GymBus built for each
    NeMo Gym server directory of `servers` (so NeMo Gym builds none: no network needed)."""
    for directory in servers:
        env = virtual_env(requirements_of(directory), directory.name, directory)
        link = root / directory.parent.name / directory.name / ".venv"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(env.path)
    return root


class _OwnStack:
    """`ng_run` of NeMo Gym's weather config with `openai_model` as the policy, on the stub."""

    def __init__(self, nemo_gym: VirtualEnv, stub_url: str, work: Path) -> None:
        self.bin = nemo_gym.python.parent
        self.tree = nemo_gym.site_packages()
        self.work = work
        self.head = free_port()
        self.log = work / "ng_run.log"
        self.process: subprocess.Popen[bytes] | None = None
        servers, configs = own_weather_stack(self.tree)
        self.settings = [
            f"+config_paths=[{','.join(map(str, configs))}]",
            f"+uv_venv_dir={link_environments(servers, work / 'venvs')}",
            "+skip_venv_if_present=true",
            f"+head_server={{host:127.0.0.1,port:{self.head}}}",
            f"+policy_base_url={stub_url}",
            "+policy_api_key=stub",
            "+policy_model_name=stub",
        ]

    def __enter__(self) -> _OwnStack:
        for attempt in range(1, STARTS + 1):
            with open(self.log, "wb") as out:
                self.process = subprocess.Popen(
                    [str(self.bin / "ng_run"), *self.settings], cwd=self.work, stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
                )  # fmt: skip
            try:
                self._wait_ready()
                return self
            except RuntimeError:
                self.__exit__()
                if attempt == STARTS:
                    raise
            except BaseException:
                self.__exit__()
                raise
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while "servers ready!" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None:
                raise RuntimeError(f"ng_run exited ({self.process.returncode}): {self._tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ng_run did not start in {START_TIMEOUT:.0f} s: {self._tail()}")
            time.sleep(0.5)
        url = f"http://127.0.0.1:{self.head}/global_config_dict_yaml"
        with urllib.request.urlopen(url, timeout=30) as reply:
            config = yaml.safe_load(json.loads(reply.read()))
        if WEATHER_AGENT not in config:
            raise RuntimeError(f"ng_run's head server names no {WEATHER_AGENT}")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def processes(self) -> list[psutil.Process]:
        """`ng_run` and every process it started (its servers, Ray's)."""
        if self.process is None or self.process.poll() is not None:
            return []
        root = psutil.Process(self.process.pid)
        return [root, *root.children(recursive=True)]

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop_ng_run(self.process)
