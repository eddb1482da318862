"""NeMo Gym 0.7.0's own, unmodified client code against GymBus's front (`gym-runner front`):
`RolloutCollectionHelper().run_examples`, `ng_collect_rollouts`, the quickstart's
`simple_agent/client.py`, and an Unsloth-style `/verify` found through the head server,
also inside a real TRL `GRPOTrainer` step.

Real NeMo Gym client code in its Python 3.13 environment (`sh scripts/install-nemo-gym.sh`),
a real nats-server, real `gym-runner serve` workers and a real `gym-runner front` process.
Environments: the weather one (one tool call), `example_multi_step` (several) and mcqa (a
verifier); NeMo RL's way in adds `example_session_state_mgmt` and a hosted NeMo Gym server
with its own agent, on a real vLLM server.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from bench._cluster import RUNNER, Cluster
from bench._ray import ray_cluster
from gymbus.schemas import DEFAULT_TIMEOUTS
from tests.fake_openai import FakeOpenAI, ServerThread, free_port
from tests.integration.test_nemo_gym import built
from tests.integration.test_nemo_gym import start_worker as start_nemo_gym_worker
from tests.vllm_server import MODEL_NAME, VllmServer

pytestmark = pytest.mark.timeout(600)

RUNNER_SCRIPT = shutil.which("gym-runner", path=str(Path(sys.executable).parent)) or "gym-runner"

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLIENTS = Path(__file__).resolve().parents[1] / "nemo_gym_clients.py"
MARK = "NEMO-GYM-CLIENT\t"
NEMO_GYM_ROOT = Path(__file__).resolve().parents[2] / "runner" / "front" / "nemo_gym_root"
FRONT_CONFIG = NEMO_GYM_ROOT / "resources_servers" / "gymbus" / "configs" / "gymbus_front.yaml"
WEATHER, MULTI_STEP = "example_single_tool_call", "example_multi_step"
GYMNASIUM = "example_multi_turn_gymnasium"
MCQA = "mcqa"
VERIFIERS = (MCQA, WEATHER)
"""The environments the Unsloth-style reward function verifies with."""
AGENTS = {WEATHER: f"{WEATHER}_simple_agent", MULTI_STEP: f"{MULTI_STEP}_simple_agent"}
PER_ENVIRONMENT = 3


def start_front(cluster: Cluster, *agents: str) -> tuple[subprocess.Popen[bytes], int]:
    """A `gym-runner front` process; returns once its head server answers."""
    port = free_port()
    log = cluster.workdir / "front.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*RUNNER, "front", *agents, "--port", str(port)],
            env=cluster.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    cluster.processes.append(process)
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"the front exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"the front did not start:\n{log.read_text()[-3000:]}"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).close()
            return process, port
        except OSError:
            time.sleep(0.2)


def rows(environment: str, count: int = PER_ENVIRONMENT) -> list[dict[str, Any]]:
    """The first `count` example rows of `environment`, naming its agent, as NeMo RL sends them."""
    lines = (EXAMPLES / f"{environment}.jsonl").read_text().splitlines()[:count]
    agent_ref = {"name": AGENTS[environment]}
    return [{**json.loads(line), "agent_ref": agent_ref, "_rowidx": i} for i, line in enumerate(lines)]


def write_rows(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def nemo_gym(python: Path, *args: str, cwd: Path, timeout: float = 300) -> str:
    """Run NeMo Gym's client code; its stdout."""
    done = subprocess.run(
        [str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def run_examples(python: Path, port: int, items: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    source = write_rows(work / f"rows-{time.monotonic_ns()}.jsonl", items)
    return client_lines(nemo_gym(python, str(CLIENTS), "run_examples", str(port), str(source), cwd=work))


def client_lines(out: str) -> list[dict[str, Any]]:
    """What `tests/nemo_gym_clients.py` printed, among what NeMo Gym prints."""
    return [json.loads(line.split(MARK, 1)[1]) for line in out.splitlines() if line.startswith(MARK)]


def post(port: int, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def server_port(head: int, name: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{head}/global_config_dict_yaml", timeout=10) as reply:
        import yaml

        config = yaml.safe_load(json.loads(reply.read()))
    (instance,) = next(iter(config[name].values())).values()
    return int(instance["port"])


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int]]:
    """Workers for both environments and mcqa (a verifier, as Unsloth's notebooks train on),
    their agents and the offline policy; the front."""
    with Cluster(tmp_path_factory.mktemp("front"), ack_wait=3.0) as cluster:
        cluster.start_worker(
            WEATHER, AGENTS[WEATHER], MULTI_STEP, AGENTS[MULTI_STEP], MCQA, f"{MCQA}_simple_agent", "offline"
        )
        _, port = start_front(cluster, *AGENTS.values(), f"{MCQA}_simple_agent")
        yield cluster, port


def test_run_examples_collects_rewarded_rollouts_of_both_environments_on_gymbus_workers(
    nemo_gym_python: Path, fronted: tuple[Cluster, int]
) -> None:
    cluster, port = fronted
    sent = rows(WEATHER) + rows(MULTI_STEP)
    results = run_examples(nemo_gym_python, port, sent, cluster.workdir)
    assert len(results) == len(sent)
    for pair in results:
        row, result = pair["row"], pair["result"]
        assert "_ng_failure_class" not in result, result
        assert isinstance(result["reward"], float)
        assert result["_rowidx"] == row["_rowidx"] and result["agent_ref"] == row["agent_ref"]
        assert result["_gymbus"]["delivery"] >= 1  # stamped by the GymBus agent worker that ran it
        kinds = [item.get("type", "message") for item in result["response"]["output"]]
        assert "function_call" in kinds and "function_call_output" in kinds
    for pair in results:  # multi-turn: a model turn after the tools' outputs, answering
        kinds = [item.get("type", "message") for item in pair["result"]["response"]["output"]]
        assert kinds.index("function_call_output") < len(kinds) - 1 and kinds[-1] == "message"


def test_ng_collect_rollouts_writes_the_rows_and_rewards_gym_runner_collect_writes(
    nemo_gym_python: Path, fronted: tuple[Cluster, int]
) -> None:
    cluster, port = fronted
    source = write_rows(cluster.workdir / "weather.jsonl", rows(WEATHER))
    ng_out, ours = cluster.workdir / "ng" / "weather.jsonl", cluster.workdir / "ours" / "weather.jsonl"
    nemo_gym(
        nemo_gym_python.parent / "ng_collect_rollouts",
        f"+input_jsonl_fpath={source}", f"+output_jsonl_fpath={ng_out}",
        "+head_server.host=127.0.0.1", f"+head_server.port={port}",
        cwd=cluster.workdir,
    )  # fmt: skip
    assert cluster.collect(source, ours).wait(timeout=300) == 0

    def by_task(path: Path) -> dict[int, tuple[float, str]]:
        found = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            answer = json.dumps(row["response"]["output"][-1]["content"])
            found[row["_ng_task_index"]] = (row["reward"], answer)
        return found

    assert by_task(ng_out) == by_task(ours) and len(by_task(ours)) == PER_ENVIRONMENT
    metrics = json.loads((ng_out.parent / "weather_aggregate_metrics.json").read_text())
    assert "mean/reward" in json.dumps(metrics)


def test_the_quickstart_client_and_gym_runner_talk_get_an_answer(
    nemo_gym_python: Path, fronted: tuple[Cluster, int]
) -> None:
    cluster, port = fronted
    site = next(nemo_gym_python.parents[1].glob("lib/python3.*/site-packages"))
    client = site / "responses_api_agents" / "simple_agent" / "client.py"
    head = ("+head_server.host=127.0.0.1", f"+head_server.port={port}")
    out = nemo_gym(nemo_gym_python, str(client), *head, cwd=cluster.workdir)
    output = json.loads(out[out.index("[") :])
    assert output[0]["type"] == "function_call" and output[0]["name"] == "get_weather"
    assert "weather" in output[-1]["content"][0]["text"].lower()

    talk = subprocess.run(
        [*RUNNER, "talk", AGENTS[WEATHER], "what's it like in sf?"],
        env=cluster.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert talk.returncode == 0, talk.stderr
    assert "tool call: get_weather(" in talk.stderr and "tool output:" in talk.stderr
    assert "weather" in talk.stdout.lower()


def test_a_reward_function_verifies_through_the_head_server(
    nemo_gym_python: Path, fronted: tuple[Cluster, int]
) -> None:
    """As Unsloth's reward function: the resources server found by name, `/verify` posted."""
    cluster, port = fronted
    run_at = server_port(port, f"{AGENTS[WEATHER]}_environment_server")
    rollout = post(run_at, "/run", json.dumps(rows(WEATHER, 1)[0]).encode())[1]
    body = write_rows(cluster.workdir / "verify.json", [{k: v for k, v in rollout.items() if k != "reward"}])
    out = nemo_gym(
        nemo_gym_python, str(CLIENTS), "verify", str(port), WEATHER, str(body), cwd=cluster.workdir
    )
    (verified,) = client_lines(out)
    assert verified["status"] == 200 and verified["body"]["reward"] == rollout["reward"]


def unsloth_reward(head_port: int, replies: list[tuple[int, float]]) -> Any:
    """A TRL reward function as Unsloth's NeMo Gym notebooks write theirs: the resources
    servers found through the head server (`cfg[name].resources_servers[name]`), and per
    completion a `/verify` of the row's fields with the prompt and the completion as a
    one-message response; a non-200 reply scores 0. Each reply's status and reward is
    appended to `replies`."""
    import requests
    import yaml

    # The body is the YAML text as a JSON string (the notebooks parse it twice: as YAML, which
    # a JSON string also is, then with OmegaConf).
    text = requests.get(f"http://127.0.0.1:{head_port}/global_config_dict_yaml", timeout=10).json()
    config = yaml.safe_load(text)

    def verify_endpoint(name: str) -> str:
        server = config[name]["resources_servers"][name]
        return f"http://{server['host']}:{server['port']}/verify"

    def reward_fn(completions: list[Any], prompts: list[Any], **kwargs: Any) -> list[float]:
        scores = []
        for i, completion in enumerate(completions):
            request = {k: v for k, v in kwargs["verify_extra"][i].items() if v is not None}
            prompt = {"role": "user", "content": prompts[i][0]["content"]}
            request["responses_create_params"] = {"input": [prompt]}
            message = {"type": "output_text", "text": completion[0]["content"], "annotations": []}
            request["response"] = {
                "id": "resp", "created_at": 0, "model": MODEL_NAME, "object": "response",
                "output": [{"id": "msg", "role": "assistant", "type": "message", "status": "completed",
                            "content": [message]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            }  # fmt: skip
            endpoint = verify_endpoint(kwargs["resources_server_ref"][i]["name"])
            reply = requests.post(endpoint, json=request, timeout=60)
            reward = reply.json().get("reward", 0.0) if reply.status_code == 200 else 0.0
            replies.append((reply.status_code, reward))
            scores.append(reward)
        return scores

    return reward_fn


async def verify_calls(url: str, environment: str) -> int:
    """How many `/verify` requests the bus's services of `environment` have answered."""
    from gymbus import bus
    from gymbus.bus import subjects

    nc = await bus.connect(url, name="test")
    try:
        stats = await bus.service_stats(nc)
    finally:
        await nc.close()
    subject = subjects.env_verify(environment)
    endpoints = [endpoint for info in stats for endpoint in info.endpoints]
    return sum(endpoint.num_requests for endpoint in endpoints if endpoint.subject == subject)


def test_an_unsloth_reward_function_scores_a_trl_grpo_step_through_the_front(
    fronted: tuple[Cluster, int], tmp_path: Path
) -> None:
    """A real TRL `GRPOTrainer` step on the tiny model, its completions scored by a reward
    function written as Unsloth's NeMo Gym notebooks write theirs, over two environments
    (mcqa and the weather one) found through the front's head server. TRL generates with
    the trainer's own model (no vLLM: nothing here needs a GPU)."""
    import asyncio

    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    from tests.tiny_model import tiny_model_dir

    cluster, port = fronted
    examples = []
    for environment in VERIFIERS:
        row = json.loads((EXAMPLES / f"{environment}.jsonl").read_text().splitlines()[0])
        prompt = next(m["content"] for m in row["responses_create_params"]["input"] if m["role"] == "user")
        examples.append({
            "prompt": [{"role": "user", "content": prompt}],
            "resources_server_ref": {"name": environment},
            "verify_extra": row,
        })  # fmt: skip
    replies: list[tuple[int, float]] = []
    before = {environment: asyncio.run(verify_calls(cluster.url, environment)) for environment in VERIFIERS}
    config = trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"), use_cpu=True, bf16=False, max_steps=1,
        per_device_train_batch_size=4, num_generations=2, max_completion_length=16, temperature=1.0,
        learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", seed=0,
        dataloader_num_workers=0,
    )  # fmt: skip
    model = tiny_model_dir()
    trainer = trl.GRPOTrainer(
        model=str(model), processing_class=AutoTokenizer.from_pretrained(model),
        reward_funcs=[unsloth_reward(port, replies)], train_dataset=Dataset.from_list(examples), args=config,
    )  # fmt: skip
    trainer.train()

    assert trainer.state.global_step == 1
    (logged,) = [entry for entry in trainer.state.log_history if "rewards/reward_fn/mean" in entry]
    assert [status for status, _ in replies] == [200] * 4  # two prompts, two completions each
    assert all(math.isfinite(reward) for _, reward in replies)
    assert logged["rewards/reward_fn/mean"] == pytest.approx(sum(r for _, r in replies) / len(replies))
    assert math.isfinite(logged["loss"])
    # Every score was a verify on the bus, by the environment the row named.
    after = {environment: asyncio.run(verify_calls(cluster.url, environment)) for environment in VERIFIERS}
    assert {environment: after[environment] - before[environment] for environment in VERIFIERS} == {
        MCQA: 2, WEATHER: 2
    }  # fmt: skip


def test_a_failed_rollout_is_a_4xx_with_its_failure_row_and_an_unknown_tool_a_404(
    fronted: tuple[Cluster, int],
) -> None:
    _, port = fronted
    run_at = server_port(port, f"{AGENTS[WEATHER]}_environment_server")
    bad = {"responses_create_params": {"input": 5}, "_rowidx": 7}
    status, body = post(run_at, "/run", json.dumps(bad).encode())
    assert status == 422 and body["_ng_failure_class"] == "invalid_input" and body["_rowidx"] == 7
    assert post(run_at, "/run", b"[1, 2]")[0] == 400
    # As a NeMo Gym server answers a route it lacks: its agents hand the body to the model.
    assert post(server_port(port, WEATHER), "/no_such_tool", b"{}") == (404, {"detail": "Not Found"})


def test_a_killed_agent_worker_costs_a_redelivery_not_a_row(nemo_gym_python: Path, tmp_path: Path) -> None:
    """Rollouts in flight on an agent worker that is killed come back, each once, from
    another; while no worker serves the agent, a new `/run` is a 503."""
    fake = FakeOpenAI(delay=1.0)
    server = ServerThread(fake.app())
    fake.url = server.start() + "/v1"
    try:
        with Cluster(tmp_path, ack_wait=3.0) as cluster:
            model = ("--model-url", fake.url, "--model", "fake", "--model-api", "responses")
            cluster.start_worker(WEATHER, "openai", model_args=model)
            first = cluster.start_worker(AGENTS[WEATHER])
            _, port = start_front(cluster, AGENTS[WEATHER])
            sent = [{**row, "_rowidx": i} for i, row in enumerate(rows(WEATHER) * 3)]
            source = write_rows(tmp_path / "rows.jsonl", sent)
            collecting = subprocess.Popen(
                [str(nemo_gym_python), str(CLIENTS), "run_examples", str(port), str(source)],
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 120
                while len(fake.requests) < 3:  # rollouts are in flight on the first worker
                    assert collecting.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
                Cluster.kill(first)
                time.sleep(1.0)  # its services' registrations lapse with its connection
                run_at = server_port(port, f"{AGENTS[WEATHER]}_environment_server")
                status, body = post(run_at, "/run", json.dumps(sent[0]).encode())
                assert status == 503 and body["_ng_failure_class"] == "no_worker"
                assert "no worker serves" in body["_ng_failure_message"]
                cluster.start_worker(AGENTS[WEATHER])
                out, err = collecting.communicate(timeout=300)
            finally:
                if collecting.poll() is None:
                    collecting.kill()
            assert collecting.returncode == 0, err[-3000:]
            results = [line["result"] for line in client_lines(out)]
            assert sorted(r["_rowidx"] for r in results) == list(range(len(sent)))
            assert all("_ng_failure_class" not in r and isinstance(r["reward"], float) for r in results)
            assert max(r["_gymbus"]["delivery"] for r in results) > 1  # redelivered after the kill
    finally:
        server.stop()


def test_a_hosted_nemo_gym_agent_runs_through_the_front_too(nemo_gym_python: Path, tmp_path: Path) -> None:
    """NeMo Gym's own `gymnasium_agent`, hosted on the bus (`serve nemo-gym:...`): its rows
    collected by `run_examples` through the front, as any GymBus agent's."""
    (server,) = built([GYMNASIUM]).values()
    agent = f"{GYMNASIUM}_agent"
    with Cluster(tmp_path, ack_wait=3.0) as cluster:
        start_nemo_gym_worker(cluster, f"nemo-gym:{GYMNASIUM}", "offline", log="hosted.log")
        _, port = start_front(cluster, agent)
        lines = (server / "data" / "example.jsonl").read_text().splitlines()[:3]
        ref = {"name": agent}
        sent = [{**json.loads(line), "agent_ref": ref, "_rowidx": i} for i, line in enumerate(lines)]
        results = [pair["result"] for pair in run_examples(nemo_gym_python, port, sent, tmp_path)]
    assert sorted(r["_rowidx"] for r in results) == [0, 1, 2]
    for result in results:
        assert "_ng_failure_class" not in result and isinstance(result["reward"], float), result
        assert result["_gymbus"]["delivery"] >= 1 and result["response"]["output"]


# --- NeMo RL's way in: NeMo Gym starts GymBus from the trainer's config_paths ---


def linked_environments(venvs: Path, env: Path) -> None:
    """NeMo Gym's environment for each server NeMo Gym starts from the front's config, where
    NeMo Gym looks for it (`uv_venv_dir`): NeMo Gym 0.7.0 would build them with uv for
    Python 3.13.14, which this machine lacks; GymBus builds the same with its own resolver."""
    servers = ("resources_servers/gymbus", "responses_api_agents/gymbus", "environment_servers/legacy_agent")
    for server in servers:
        (venvs / server).mkdir(parents=True)
        (venvs / server / ".venv").symlink_to(env)


def nemo_rl_checks(result: dict[str, Any]) -> int:
    """NeMo RL's contract for one `/run` result (written from its description): every
    trainable output item (non-empty `generation_token_ids`) has `prompt_token_ids` that
    start with all earlier prompt and generation tokens of the rollout, and one finite
    logprob per generated token; at least one item is trainable; a reward. Returns how many
    model calls it trains on."""
    assert isinstance(result["reward"], float)
    seen: list[int] = []
    trainable = 0
    for item in result["response"]["output"]:
        generated = item.get("generation_token_ids") or []
        if not generated:
            continue
        prompt, logprobs = item["prompt_token_ids"], item["generation_log_probs"]
        assert prompt[: len(seen)] == seen, "Non-contiguous messages found"
        assert len(logprobs) == len(generated) and all(math.isfinite(lp) for lp in logprobs)
        seen = prompt + generated
        trainable += 1
    assert trainable > 0, f"a result with no trainable item: {json.dumps(result['response'])[:3000]}"
    return trainable


# The tiny model is random: steered by the test vLLM server's regex logits processor
# (tests/vllm_steering.py), each turn is a call of one of the offered tools in the Hermes
# format or a few words, so rollouts take several steps. The processor masks tokens after
# vLLM computed the logprobs it reports: those stay the model's own, what scoring the same
# tokens again gives.
STEER = (
    r'(<tool_call>\n\{"name": "(get_weather|increment_counter|get_counter_value)", "arguments": '
    r'\{("city": "[A-Z][a-z]{2,8}"|"count": [1-9])?\}\}\n</tool_call>|It is (cold|sunny|rainy)\.)'
)
MAX_OUTPUT_TOKENS = 128
"""Room for the longest text `STEER` allows (under 100 characters, a token at most each): a
generation cut short has no end-of-turn token, so the next turn's prompt cannot continue it
token for token, and the vllm model function refuses that call (it never guesses)."""
SESSION_STATE = "example_session_state_mgmt"
NEMO_RL_AGENTS = {
    WEATHER: AGENTS[WEATHER],
    SESSION_STATE: f"{SESSION_STATE}_simple_agent",
    GYMNASIUM: f"{GYMNASIUM}_agent",
}


def extended_config(path: Path, environments: tuple[str, ...], workers: int) -> Path:
    """The shipped config, extended as its comment tells a user to for their own agents:
    each of `environments` under `serve` (the gymnasium one as a hosted NeMo Gym server
    with NeMo Gym's own `gymnasium_agent`), and each agent's three entries; its front's
    `workers`."""
    import yaml

    config = yaml.safe_load(FRONT_CONFIG.read_text())
    front = config["gymbus_front"]["resources_servers"]["gymbus"]
    for environment in environments:
        agent = NEMO_RL_AGENTS[environment]
        front["serve"] += [f"nemo-gym:{GYMNASIUM}"] if environment == GYMNASIUM else [environment, agent]
        config[agent] = {"responses_api_agents": {"gymbus": {"entrypoint": "app.py"}}}
        relay = {"entrypoint": "app.py", "agent_server": {"type": "responses_api_agents", "name": agent}}
        config[f"{agent}_environment_server"] = {"environment_servers": {"legacy_agent": relay}}
        config[environment] = {"resources_servers": {"gymbus": {"entrypoint": "app.py", "domain": "agent"}}}
    front["workers"] = workers
    front["log_dir"] = str(path.parent)  # the workers' log: `gymbus-front-<pid>.log`
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def nemo_rl_rows(per_environment: int) -> list[dict[str, Any]]:
    """`per_environment` example rows (cycled) of each environment, as NeMo RL sends them:
    its agent named, `_rowidx` added, temperature and top_p set, output tokens capped
    (`MAX_OUTPUT_TOKENS`); each asks the server to steer the policy (`STEER`). No seed:
    vLLM's CPU build can crash on a batch of seeded requests, and these run at once."""
    (gymnasium,) = built([GYMNASIUM]).values()
    sources = {
        WEATHER: EXAMPLES / f"{WEATHER}.jsonl",
        SESSION_STATE: EXAMPLES / f"{SESSION_STATE}.jsonl",
        GYMNASIUM: gymnasium / "data" / "example.jsonl",
    }
    sent = []
    for environment, source in sources.items():
        lines = source.read_text().splitlines()
        for i in range(per_environment):
            row = json.loads(lines[i % len(lines)])
            extra = {"vllm_xargs": {"gymbus_regex": STEER}}
            params = row["responses_create_params"] | {
                "temperature": 1.0, "top_p": 1.0, "max_output_tokens": MAX_OUTPUT_TOKENS,
                "metadata": {"extra_body": json.dumps(extra)},
            }  # fmt: skip
            agent_ref = {"type": "responses_api_agents", "name": NEMO_RL_AGENTS[environment]}
            sent.append(
                {**row, "responses_create_params": params, "agent_ref": agent_ref, "_rowidx": len(sent)}
            )
    return sent


def scored_by_vllm(server: VllmServer, prompt: list[int], generated: list[int]) -> list[float]:
    """The logprob the vLLM server gives each of `generated` after `prompt`, scoring the
    sequence again (`prompt_logprobs`: the model's own logprob of each prompt token)."""
    body = {"model": MODEL_NAME, "prompt": prompt + generated, "max_tokens": 1, "prompt_logprobs": 0}
    headers = {"Content-Type": "application/json"}
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"{server.url}/completions", data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as reply:
        scored = json.loads(reply.read())["choices"][0]["prompt_logprobs"]
    return [scored[len(prompt) + i][str(token)]["logprob"] for i, token in enumerate(generated)]


def gymbus_workers(client: subprocess.Popen[str]) -> list[psutil.Process]:
    """The `gym-runner serve` processes NeMo Gym's front started, under the client's process."""
    found = []
    for process in psutil.Process(client.pid).children(recursive=True):
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        if "gymbus.runner" in command and "serve" in command:
            found.append(process)
    return found


@dataclass
class NemoRlRun:
    """What NeMo RL's call got: the rows sent, every result line, what NeMo Gym's processes
    wrote to stderr (the front's log among it), and, in seconds from the kill, when the
    replacement worker was ready and when the last result came."""

    sent: list[dict[str, Any]]
    results: list[dict[str, Any]]
    errors: str
    replaced_after: float | None
    """`None` if the last result came first (another worker ran the killed one's rollouts)."""
    last_after: float


def nemo_rl_run(
    nemo_gym_python: Path, vllm_server: VllmServer, ray_address: str, tmp_path: Path, workers: int
) -> NemoRlRun:
    """NeMo RL's call, in the Ray cluster at `ray_address`: `RunHelper().start` on its config
    dict (GymBus's front with `workers` worker processes among its `config_paths`, its vLLM
    server as `policy_base_url`), `run_examples` on its rows; one worker process SIGKILLed
    once the first result is in."""
    config = {
        "config_paths": [str(extended_config(tmp_path / "gymbus.yaml", (SESSION_STATE, GYMNASIUM), workers))],
        "policy_base_url": [vllm_server.url],
        "policy_model_name": MODEL_NAME,
        "policy_api_key": "dummy_key",
        "head_server": {"host": "127.0.0.1", "port": free_port()},
        "uv_venv_dir": str(tmp_path / "venvs"),
        "skip_venv_if_present": True,
        "ray_head_node_address": ray_address,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    sent = nemo_rl_rows(per_environment=8)
    source = write_rows(tmp_path / "rows.jsonl", sent)
    environ = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    environ |= {"NEMO_GYM_EXTRA_ROOTS": str(NEMO_GYM_ROOT), "GYMBUS_RUNNER": RUNNER_SCRIPT}
    with open(tmp_path / "nemo_gym.err", "w+") as stderr:
        client = subprocess.Popen(
            [str(nemo_gym_python), str(CLIENTS), "start_and_run", str(tmp_path / "config.json"), str(source)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True, env=environ,
        )  # fmt: skip
        lines, times = _killing_a_worker_at_the_first_result(client, workers, tmp_path)
        stderr.seek(0)
        errors = stderr.read()
    assert client.returncode == 0, f"{''.join(lines)[-2000:]}\n{errors[-5000:]}"
    killed, replaced, last = times
    assert killed, "no result came"
    return NemoRlRun(
        sent, client_lines("".join(lines)), errors, replaced - killed if replaced else None, last - killed
    )


def _killing_a_worker_at_the_first_result(
    client: subprocess.Popen[str], workers: int, logs: Path
) -> tuple[list[str], tuple[float, float, float]]:
    """The client's output lines, and when (monotonic) a worker was killed, its replacement
    said it was ready (the `workers + 1`-th "ready:" line of the workers' log) and the last
    result came."""
    lines: list[str] = []
    killed = last = 0.0
    replaced: list[float] = []
    watching = threading.Thread(target=_note_ready, args=(logs, workers + 1, replaced), daemon=True)
    try:
        assert client.stdout is not None
        for line in client.stdout:
            lines.append(line)
            if line.startswith(MARK):
                last = time.monotonic()
                if not killed:
                    running = gymbus_workers(client)
                    assert len(running) == workers, [p.cmdline() for p in running]
                    running[0].kill()
                    killed = time.monotonic()
                    watching.start()
        client.wait(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return lines, (killed, replaced[0] if replaced else 0.0, last)


def _note_ready(logs: Path, count: int, noted: list[float], timeout: float = 300) -> None:
    """Append the time the workers' logs under `logs` hold `count` "ready:" lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = "".join(log.read_text(errors="replace") for log in logs.glob("gymbus-front-*.log"))
        if text.count("ready: serving") >= count:
            noted.append(time.monotonic())
            return
        time.sleep(0.1)


@pytest.mark.timeout(900)  # Ray, NeMo Gym's servers, GymBus's workers, 24 rollouts on vLLM, a redelivery
@pytest.mark.parametrize("workers", [2, 1])
def test_nemo_rl_gets_every_row_trainable_from_the_front_it_started_though_a_worker_is_killed(
    nemo_gym_python: Path, vllm_server: VllmServer, tmp_path: Path, workers: int
) -> None:
    """`RunHelper().start` with a config dict shaped as NeMo RL's (GymBus's config among its
    `config_paths`, its front configured for `workers` worker processes, its vLLM server as
    `policy_base_url`, the head server on a free port, its Ray cluster), then `run_examples`
    on 24 rows of three environments: the weather one (a tool call, then an answer),
    `example_session_state_mgmt` (tools over a session's state) and a hosted NeMo Gym server
    played by NeMo Gym's own `gymnasium_agent` (scripted user turns). One worker process is
    SIGKILLed once the first result is in (with 1, the lone one: its replacement takes the
    redelivered tasks). Every row comes back exactly once and passes NeMo RL's checks, its
    logprobs those vLLM gives the same tokens; the rollouts the killed worker held ran again
    (`delivery` 2); the front's log names the replacement; and the last row came within the
    ack wait, a restart and a few seconds."""
    linked_environments(tmp_path / "venvs", nemo_gym_python.parents[1])
    with ray_cluster(nemo_gym_python.parent / "ray") as ray_address:
        run = nemo_rl_run(nemo_gym_python, vllm_server, ray_address, tmp_path, workers)
    by_row = Counter(line["result"]["_rowidx"] for line in run.results)
    assert sorted(by_row) == [row["_rowidx"] for row in run.sent] and set(by_row.values()) == {1}
    results = {line["result"]["_rowidx"]: line["result"] for line in run.results}
    trained: dict[int, int] = {}  # model calls NeMo RL trains on, by row
    differences = []
    for row in run.sent:
        result = results[row["_rowidx"]]
        assert "_ng_failure_class" not in result, result
        assert result["agent_ref"]["name"] == row["agent_ref"]["name"]
        trained[row["_rowidx"]] = nemo_rl_checks(result)
        for item in result["response"]["output"]:
            if item.get("generation_token_ids"):
                prompt, generated = item["prompt_token_ids"], item["generation_token_ids"]
                scored = scored_by_vllm(vllm_server, prompt, generated)
                differences += [abs(a - b) for a, b in zip(scored, item["generation_log_probs"], strict=True)]
    redelivered = [index for index, result in results.items() if result["_gymbus"]["delivery"] >= 2]
    ready = "not before the last row" if run.replaced_after is None else f"at {run.replaced_after:.1f} s"
    print(
        f"{workers} worker(s): {len(differences)} sampled tokens, largest logprob difference from vLLM "
        f"{max(differences):.2e}; {len(redelivered)} rollouts redelivered; after the kill, the replacement was "
        f"ready {ready} and the last row came at {run.last_after:.1f} s"
    )
    assert max(differences) <= 1e-4
    # Multi-turn: a tool's output, then a trained model turn after it; the scripted user's turns.
    scripted = {
        row["_rowidx"]: row for row in run.sent if row["agent_ref"]["name"] == NEMO_RL_AGENTS[GYMNASIUM]
    }
    tools_then_turn = [
        index for index, result in results.items() if index not in scripted and trained[index] >= 2
        and "function_call_output" in [item.get("type") for item in result["response"]["output"]]
    ]  # fmt: skip
    assert tools_then_turn, [json.dumps(results[index]["response"]["output"])[:600] for index in results]
    for index, row in scripted.items():
        assert trained[index] == len(row["follow_ups"]) + 1
    # The kill cost redeliveries, not rows, and a replacement.
    assert redelivered, "the killed worker held no rollout"
    assert "replaced a worker process" in run.errors, run.errors[-3000:]
    # Redelivered once the ack wait is over, to the other worker, or with workers=1 to the
    # replacement once it is ready; then the rollouts run again on the CPU vLLM server.
    if workers == 1:
        assert run.replaced_after is not None, "the lone worker's replacement was never ready"
    assert run.last_after < max(DEFAULT_TIMEOUTS.ack_wait, run.replaced_after or 0.0) + 30
