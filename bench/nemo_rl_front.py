"""P14: NeMo RL's way in, measured on both sides: NeMo Gym started from a config dict's
`config_paths` by `RunHelper().start`, every weather row posted at once by
`RolloutCollectionHelper().run_examples`, then `helper.shutdown()`.

The client (`bench/nemo_rl_client.py`) runs in NeMo Gym 0.7.0's own environment and makes
NeMo RL's calls unmodified, on a config dict shaped as NeMo RL's (`config_paths`,
`policy_base_url`, `policy_model_name`, `policy_api_key`, a head server on a free port,
`uv_venv_dir` with `skip_venv_if_present`, and `ray_head_node_address`: one Ray cluster of
the benchmark's own, `bench._ray`, that both sides join as NeMo RL's would). The same rows
on both sides (`examples/example_single_tool_call.jsonl` repeated, each naming the agent
`example_single_tool_call_simple_agent`, with `_rowidx`, temperature and top_p as NeMo RL
sends them); the same model, `bench.vllm_stub` at 0 ms, whose answers are the offline
policy's (one `get_weather` call, then a reply):

- gymbus: the shipped `gymbus_front.yaml`, trimmed to the weather environment (one worker
  process, its default). NeMo Gym starts its `legacy_agent` environment server (the relay
  to the agent's `/run`) and the `gymbus` servers, one of which becomes
  `gym-runner front --from-nemo-gym`: its embedded nats-server, its supervised worker, its
  agent's `/run` a task on the bus. The policy is GymBus's `vllm` model function on the
  stub's Chat Completions route with token capture (prompt and generated token ids and
  logprobs per call, what NeMo RL trains on);
- nemo_gym: NeMo Gym's own weather config and `openai_model.yaml`, the servers P13's
  `ng_run` starts (the weather resources server, `simple_agent`, the `legacy_agent`
  environment server, `openai_model`). The policy is `openai_model` on the stub's Responses
  API route: the same answers, without token capture (NeMo Gym's `vllm_model` would capture
  tokens as NeMo RL needs; `openai_model` is the lighter of the two).

Sides alternate, GymBus first in each round; each side is started, used and shut down in
each round, as NeMo RL does every run. Per run: `RunHelper().start`'s time to ready (as the
client measures it), the rate from the stub's first model call to the last result, and CPU
over that span of every process the client started (NeMo Gym's servers and whatever they
started: for gymbus the front, its worker and nats-server too), gymbus's split into its own
processes and NeMo Gym's around them. The client's own CPU (NeMo Gym's rollout helper, its
Ray driver and its head server, a thread of `RunHelper`'s process) is reported apart; the
stub and the Ray cluster count on neither side.

No test runs P14 small: one run of each side starts NeMo Gym's servers (20 to 120 s here)
and a Ray cluster, minutes in all, beyond what CI can spend on it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench._procs import EXAMPLE, WEATHER, WEATHER_AGENT
from bench._ray import RAY_ENVIRONMENT, ray_cluster
from bench.nemo_gym_front import link_environments, own_weather_stack
from bench.openai_stub import StubServer, free_port
from bench.vllm_stub import VLLMStub
from gymbus.functions.nemo_gym import virtual_env
from gymbus.functions.nemo_gym._venv import VirtualEnv, pinned

__all__ = ["SIDES", "StartedRun", "p14_started_rollouts"]

SIDES = ("gymbus", "nemo_gym")
CLIENT = Path(__file__).resolve().parent / "nemo_rl_client.py"
FRONT_ROOT = Path(__file__).resolve().parent.parent / "runner" / "front" / "nemo_gym_root"
FRONT_CONFIG = FRONT_ROOT / "resources_servers" / "gymbus" / "configs" / "gymbus_front.yaml"
RUNNER_SCRIPT = shutil.which("gym-runner", path=str(Path(sys.executable).parent)) or "gym-runner"
RUN_TIMEOUT = 900.0
"""Seconds one run (start, rollouts, shutdown) may take."""
MARK = "P14 "


@dataclass
class StartedRun:
    """One run of NeMo RL's call against one side."""

    side: str
    rollouts: int
    start_seconds: float
    """`RunHelper().start`'s time to ready."""
    seconds: float
    """From the first model call to the last result."""
    side_cpu: float
    """CPU seconds of every process the client started, over `seconds`."""
    gymbus_cpu: float
    """The part of `side_cpu` spent by GymBus's own processes (0 on NeMo Gym's side)."""
    client_cpu: float
    """CPU seconds of the client itself over `seconds`."""

    @property
    def rate(self) -> float:
        return self.rollouts / self.seconds

    def per_thousand(self, cpu: float) -> float:
        return cpu / self.rollouts * 1000


def p14_started_rollouts(
    rollouts: int, rounds: int, work: Path, sides: tuple[str, ...] = SIDES
) -> list[StartedRun]:
    """`rounds` alternations of NeMo RL's call with `rollouts` weather rows on each of
    `sides`, GymBus first."""
    work.mkdir(parents=True, exist_ok=True)
    nemo_gym = virtual_env([pinned()], "NeMo Gym")
    rows = _rows(work / "weather.jsonl", rollouts)
    stub = StubServer(VLLMStub())
    stub_url = stub.start()
    runs = []
    try:
        with ray_cluster(nemo_gym.python.parent / "ray") as ray:
            configs = {side: _config(side, nemo_gym, stub_url, ray, work) for side in sides}
            for round_ in range(rounds):
                for side in sides:
                    runs.append(
                        _run(side, nemo_gym, configs[side], rows, stub.stub, work / f"{side}-{round_}.log")
                    )
    finally:
        stub.stop()
    return runs


def _rows(path: Path, count: int) -> Path:
    """`count` weather rows as NeMo RL sends them: the agent named, `_rowidx`, sampling set."""
    lines = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    with open(path, "w") as out:
        for index in range(count):
            row = lines[index % len(lines)]
            params = row["responses_create_params"] | {"temperature": 1.0, "top_p": 1.0}
            agent_ref = {"type": "responses_api_agents", "name": WEATHER_AGENT}
            out.write(json.dumps({**row, "responses_create_params": params, "agent_ref": agent_ref,
                                  "_rowidx": index}) + "\n")  # fmt: skip
    return path


def _config(side: str, nemo_gym: VirtualEnv, stub_url: str, ray: str, work: Path) -> dict[str, Any]:
    """The config dict NeMo RL would pass for `side` (its head server's port set per run)."""
    tree = nemo_gym.site_packages()
    if side == "gymbus":
        relay = tree / "environment_servers" / "legacy_agent"
        servers = [
            FRONT_ROOT / "resources_servers" / "gymbus",
            FRONT_ROOT / "responses_api_agents" / "gymbus",
            relay,
        ]
        configs = [_weather_front_config(work / "gymbus_weather.yaml")]
        policy: str | list[str] = [stub_url]
    else:
        servers, configs = own_weather_stack(tree)
        policy = stub_url
    return {
        "config_paths": [str(path) for path in configs],
        "policy_base_url": policy,
        "policy_model_name": "stub",
        "policy_api_key": "stub",
        "uv_venv_dir": str(link_environments(servers, work / f"venvs-{side}")),
        "skip_venv_if_present": True,
        "ray_head_node_address": ray,
    }


def _weather_front_config(path: Path) -> Path:
    """The shipped `gymbus_front.yaml`, its `serve` and entries trimmed to the weather
    environment and its agent."""
    config = yaml.safe_load(FRONT_CONFIG.read_text())
    front = config["gymbus_front"]["resources_servers"]["gymbus"]
    front["serve"] = [WEATHER, WEATHER_AGENT]
    kept = {"gymbus_front", WEATHER, WEATHER_AGENT, f"{WEATHER_AGENT}_environment_server"}
    path.write_text(yaml.safe_dump({name: block for name, block in config.items() if name in kept}))
    return path


def _run(
    side: str, nemo_gym: VirtualEnv, config: dict[str, Any], rows: Path, stub: VLLMStub, log: Path
) -> StartedRun:
    """One run of the client against `side`; its figures."""
    path = log.with_suffix(".json")
    path.write_text(json.dumps({**config, "head_server": {"host": "127.0.0.1", "port": free_port()}}))
    environ = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POLICY_BASE_URL")}
    environ |= {"NEMO_GYM_EXTRA_ROOTS": str(FRONT_ROOT), "GYMBUS_RUNNER": RUNNER_SCRIPT, **RAY_ENVIRONMENT}
    with open(log, "wb") as err:
        client = subprocess.Popen(
            [str(nemo_gym.python), "-P", str(CLIENT), str(path), str(rows)], cwd=log.parent, env=environ,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
        )  # fmt: skip
    marked = _marked_lines(client, log.with_suffix(".out"))
    started: list[str] = []
    everyone: set[psutil.Process] = set()
    try:
        started = _next(marked, client, "started", log)
        before = _cpu_by_process(client)
        served = stub.served
        _go(client)
        first_call, done = _await_done(marked, client, stub, served, log)
        after = _cpu_by_process(client)
        everyone = set(after)
        commands = {process: _command(process) for process in everyone}
        _go(client)
        client.wait(120)
    finally:
        _stop(client, everyone)
    results, failures, last = int(done[0]), int(done[1]), float(done[2])
    if failures or results != _count(rows):
        raise RuntimeError(f"{side}: {results} results of {_count(rows)}, {failures} failed; see {log}")
    spent = {process: cpu - before.get(process, 0.0) for process, cpu in after.items()}
    _write_processes(log.with_suffix(".processes"), spent, commands)
    return StartedRun(
        side, results, float(started[0]), last - first_call, sum(spent.values()),
        sum(cpu for process, cpu in spent.items() if _is_gymbus(commands[process])), float(done[3]) - float(started[1]),
    )  # fmt: skip


def _marked_lines(client: subprocess.Popen[str], rest: Path) -> queue.Queue[str | None]:
    """The client's lines meant for the benchmark, read in a thread, `None` at its end; the
    rest of its stdout (NeMo Gym's servers' own) goes to the file `rest`."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert client.stdout is not None
        with open(rest, "w") as out:
            for line in client.stdout:
                if line.startswith(MARK):
                    lines.put(line[len(MARK) :].strip())
                else:
                    out.write(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _next(lines: queue.Queue[str | None], client: subprocess.Popen[str], word: str, log: Path) -> list[str]:
    try:
        line = lines.get(timeout=RUN_TIMEOUT)
    except queue.Empty:
        line = None
    if line is None or not line.startswith(word + " "):
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the client said {line!r}, not {word!r} (exit status {client.poll()}):\n{tail}")
    return line.split()[1:]


def _await_done(
    lines: queue.Queue[str | None], client: subprocess.Popen[str], stub: VLLMStub, served: int, log: Path
) -> tuple[float, list[str]]:
    """The first model call's time (polled) and the client's `done` line."""
    first_call = 0.0
    while lines.empty():
        if not first_call and stub.served > served:
            first_call = time.monotonic()
        time.sleep(0.02)
    return first_call, _next(lines, client, "done", log)


def _go(client: subprocess.Popen[str]) -> None:
    assert client.stdin is not None
    client.stdin.write("\n")
    client.stdin.flush()


def _cpu_by_process(client: subprocess.Popen[str]) -> dict[psutil.Process, float]:
    """CPU seconds of every process the client started (not the client itself)."""
    found = {}
    for process in psutil.Process(client.pid).children(recursive=True):
        try:
            times = process.cpu_times()
            found[process] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return found


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return "(exited)"


def _write_processes(
    path: Path, spent: dict[psutil.Process, float], commands: dict[psutil.Process, str]
) -> None:
    """Each process of the run, its CPU over the run and whether it is GymBus's, for a reader
    who asks where a side's CPU went."""
    with open(path, "w") as out:
        for process, cpu in sorted(spent.items(), key=lambda item: -item[1]):
            kind = "gymbus" if _is_gymbus(commands[process]) else "nemo_gym"
            out.write(f"{cpu:8.2f} {kind:8} {process.pid} {commands[process][:300]}\n")


def _is_gymbus(command: str) -> bool:
    """GymBus's own: the front (`gym-runner`), its workers and its nats-server."""
    return "gym-runner" in command or "gymbus.runner" in command or "nats-server" in command


def _stop(client: subprocess.Popen[str], seen: set[psutil.Process]) -> None:
    """The client and every process it started that still runs (`shutdown` stops its
    servers; a failed run may leave them)."""
    survivors = set(seen)
    if client.poll() is None:
        survivors |= {psutil.Process(client.pid), *_cpu_by_process(client)}
    for process in survivors:
        try:
            process.kill()
        except psutil.Error:
            pass
    client.wait()


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())
