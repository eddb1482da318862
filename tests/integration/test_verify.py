"""`gym-runner verify` against a real nats-server: stored rewards reproduced, disagreements and
bad rows reported by line, and rows written in input order while verdicts arrive out of order."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gymbus.bus import ServiceHost, environment_service
from gymbus.functions import Environment, MemoryState, Session
from gymbus.functions.registry import REGISTRY
from gymbus.runner import ProgressView, VerifyOptions, verify_rollouts
from gymbus.runner.verification._rescore import Stored
from gymbus.runner.verification._verify import _unserved
from gymbus.schemas import UpstreamFailed, VerifyRequest, VerifyResult
from tests.conftest import EXAMPLES, WEATHER, WEATHER_AGENT
from tests.integration.test_collect import read_jsonl, run_cli

# --- a graded test environment: the reward is the row's own `expected` field ---


class Graded(VerifyRequest, kw_only=True):
    expected: float
    index: int = 0


class GradedResult(VerifyResult, kw_only=True):
    verdict: str


async def graded_verify(request: Graded, session: Session) -> GradedResult:
    return GradedResult(reward=request.expected, verdict=f"graded {request.index}")


GRADED = Environment(name="graded", verify=graded_verify, verify_request=Graded, agents=("graded_agent",))
RESPONSE = {
    "id": "resp_1",
    "created_at": 1.0,
    "model": "policy",
    "object": "response",
    "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
}


def graded_row(index: int, expected: float | None, stored: float, **fields: Any) -> dict[str, Any]:
    row = {
        "responses_create_params": {"input": f"question {index}"},
        "response": RESPONSE,
        "reward": stored,
        "verdict": "stale",
        "expected": expected,
        "index": index,
        "agent_ref": {"type": "responses_api_agents", "name": "graded_agent"},
        "_ng_task_index": index,
        "_ng_rollout_index": 0,
        **fields,
    }
    return {k: v for k, v in row.items() if v is not None}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture
def graded(host: ServiceHost) -> Iterator[ServiceHost]:
    added = REGISTRY.add([GRADED], "tests/integration/test_verify.py")
    yield host
    REGISTRY.remove(added)


# --- GymBus's own rollouts, on the embedded default ---


def started_in(tmp: Path) -> list[psutil.Process]:
    """Live processes started with `TMPDIR=tmp`: the embedded server (its config lives there)
    and the workers. Other people's nats-servers on the same machine do not count."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if str(tmp) in " ".join(process.cmdline()) or process.environ().get("TMPDIR") == str(tmp):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_reverifying_collected_weather_rollouts_reproduces_every_reward(tmp_path: Path) -> None:
    rollouts = tmp_path / "weather.jsonl"
    collected = run_cli(
        "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(rollouts),
        "--agent", WEATHER_AGENT, "--num-repeats", "3",
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    rescored = tmp_path / "rescored.jsonl"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_cli(
        "verify", "-i", str(rollouts), "-o", str(rescored), "--concurrency", "4", env={"TMPDIR": str(scratch)}
    )
    assert done.returncode == 0, done.stderr
    assert "started embedded nats-server" in done.stderr
    assert "15 agree with the stored reward, 0 disagree" in done.stderr
    assert read_jsonl(rescored) == read_jsonl(rollouts)  # same rows, same order, same rewards
    assert read_jsonl(tmp_path / "rescored_disagreements.jsonl") == []
    assert read_jsonl(tmp_path / "rescored_failures.jsonl") == []
    metrics = json.loads((tmp_path / "rescored_aggregate_metrics.json").read_text())
    assert (
        metrics[0]["agent_ref"]["name"] == WEATHER_AGENT and metrics[0]["key_metrics"]["mean/reward"] == 1.0
    )
    assert started_in(scratch) == []  # the embedded server and its environment worker are gone


def test_reverifying_counter_rollouts_replays_their_calls_in_fresh_sessions(tmp_path: Path) -> None:
    """example_session_state_mgmt verifies from session state; re-verifying has none, so
    the counter is rebuilt from each rollout's calls, and a tampered history is caught."""
    rollouts = tmp_path / "counter.jsonl"
    agent = ["--agent", "example_session_state_mgmt_simple_agent"]
    collected = run_cli(
        "collect", "-i", str(EXAMPLES / "example_session_state_mgmt.jsonl"), "-o", str(rollouts), *agent
    )
    assert collected.returncode == 0, collected.stderr
    rows = [solved_counter(row) for row in read_jsonl(rollouts)]
    wrong = rows[2]["response"]["output"][0]  # the increment, now by one more
    wrong["arguments"] = json.dumps({"count": json.loads(wrong["arguments"])["count"] + 1})
    source = write_jsonl(tmp_path / "stored.jsonl", rows)
    done = run_cli("verify", "-i", str(source), "-o", str(tmp_path / "rescored.jsonl"))
    assert done.returncode == 3, done.stderr  # one disagrees
    assert "4 agree with the stored reward, 1 disagree" in done.stderr
    task, rollout = rows[2]["_ng_task_index"], rows[2]["_ng_rollout_index"]
    assert f"{source}:3 (task {task}, rollout {rollout}): stored 1.0, new 0.0" in done.stderr
    assert [row["reward"] for row in read_jsonl(tmp_path / "rescored.jsonl")] == [1.0, 1.0, 0.0, 1.0, 1.0]


# --- NeMo Gym's rollout files: no agent_ref, NeMo Gym's response shape ---

_NULL_PARAMS = [
    "background",
    "include",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
    "stream",
]


def nemo_gym_rollout(task: dict[str, Any], number: int, reward: float) -> dict[str, Any]:
    """A rollout row as NeMo Gym writes it for the weather environment (no agent_ref, no
    `_ng_*` indices, every request parameter spelled out, the full Responses API object)."""
    params = task["responses_create_params"]
    call = f"call_{number}"
    return {
        "responses_create_params": {
            **dict.fromkeys(_NULL_PARAMS),
            "input": [{**item, "type": "message"} for item in params["input"]],
            "parallel_tool_calls": False,
            "tool_choice": None,
            "tools": params["tools"],
        },
        "response": {
            "id": f"resp_{number}", "created_at": 1756071082.0, "error": None, "incomplete_details": None,
            "instructions": None, "metadata": {}, "model": "gpt-4.1-2025-04-14", "object": "response",
            "output": [
                {"arguments": '{"city":"San Francisco"}', "call_id": call, "name": "get_weather",
                 "type": "function_call", "id": f"fc_{number}", "status": "completed"},
                {"call_id": call, "type": "function_call_output", "id": None, "status": None,
                 "output": '{"city": "San Francisco", "weather_description": "The weather in San Francisco is cold."}'},
                {"id": f"msg_{number}", "role": "assistant", "status": "completed", "type": "message",
                 "content": [{"annotations": [], "text": "It is cold.", "type": "output_text", "logprobs": []}]},
            ],
            "parallel_tool_calls": False, "temperature": 1.0, "tool_choice": "auto", "tools": params["tools"],
            "top_p": 1.0, "background": False, "max_output_tokens": None, "previous_response_id": None,
            "reasoning": {"effort": None, "generate_summary": None, "summary": None}, "service_tier": "default",
            "status": "completed", "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "top_logprobs": 0, "truncation": "disabled", "user": None, "prompt_cache_key": None,
            "safety_identifier": None, "store": True,
            "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 129},
        },
        "reward": reward,
    }  # fmt: skip


def test_a_nemo_gym_rollout_file_without_agent_ref_verifies_with_agent(tmp_path: Path) -> None:
    tasks = [json.loads(line) for line in (EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()]
    rows = [nemo_gym_rollout(task, n, 1.0) for n, task in enumerate(tasks)]
    rows[3]["reward"] = 0.0  # tampered: the weather verifier always says 1.0
    source = write_jsonl(tmp_path / "nemo_gym_rollouts.jsonl", rows)
    out = tmp_path / "rescored.jsonl"
    done = run_cli("verify", "-i", str(source), "-o", str(out), "--agent", WEATHER_AGENT)
    assert done.returncode == 3, done.stderr  # one disagrees
    assert "4 agree with the stored reward, 1 disagree" in done.stderr
    assert f"{source}:4: stored 0.0, new 1.0" in done.stderr
    rescored = read_jsonl(out)
    assert [row["reward"] for row in rescored] == [1.0] * 5
    rows[3]["reward"] = 1.0
    assert rescored == rows  # every NeMo Gym field is kept as it was; no agent_ref is added
    [disagreement] = read_jsonl(tmp_path / "rescored_disagreements.jsonl")
    assert disagreement == {
        "_ng_input_line": 4, "_ng_task_index": None, "_ng_rollout_index": None,
        "agent_ref": {"name": WEATHER_AGENT}, "stored_reward": 0.0, "reward": 1.0,
    }  # fmt: skip


def test_the_exit_status_says_whether_every_row_agreed_and_only_written_files_are_named(
    tmp_path: Path,
) -> None:
    collected = tmp_path / "weather.jsonl"
    done = run_cli(
        "collect", "-i", str(EXAMPLES / f"{WEATHER}.jsonl"), "-o", str(collected), "--agent", WEATHER_AGENT
    )
    assert done.returncode == 0, done.stderr
    rows = collected.read_text().splitlines()

    agreed = run_cli("verify", "-i", str(collected), "-o", str(tmp_path / "agreed.jsonl"))
    assert agreed.returncode == 0, agreed.stderr
    assert f"Rescored: {tmp_path / 'agreed.jsonl'}" in agreed.stderr
    assert "Disagreements:" not in agreed.stderr and "Failures:" not in agreed.stderr
    assert not (tmp_path / "agreed_disagreements.jsonl").exists()

    first = json.loads(rows[0])  # rows are in completion order: any task may come first
    changed = json.dumps({**first, "reward": 0.0})
    disagreed = run_cli("verify", "-i", "-", "-o", str(tmp_path / "changed.jsonl"), feed=changed + "\n")
    assert disagreed.returncode == 3, disagreed.stderr
    key = f"task {first['_ng_task_index']}, rollout {first['_ng_rollout_index']}"
    assert f"<stdin>:1 ({key}): stored 0.0, new 1.0" in disagreed.stderr
    assert f"Disagreements: {tmp_path / 'changed_disagreements.jsonl'}" in disagreed.stderr
    assert "Failures:" not in disagreed.stderr

    unparsable = write_jsonl(tmp_path / "one_bad.jsonl", [*rows[1:], "{oops"])
    one_bad = run_cli("verify", "-i", str(unparsable), "-o", str(tmp_path / "one_bad_out.jsonl"))
    assert one_bad.returncode == 3, one_bad.stderr
    assert f"{unparsable}:5: not a JSON object" in one_bad.stderr and "Disagreements:" not in one_bad.stderr

    nothing = run_cli("verify", "-i", "-", "-o", str(tmp_path / "nothing.jsonl"), feed="{oops\n")
    assert nothing.returncode == 4, nothing.stderr
    assert (
        "Rescored:" not in nothing.stderr
        and f"Failures: {tmp_path / 'nothing_failures.jsonl'}" in nothing.stderr
    )


def test_a_row_whose_started_worker_stopped_serving_points_at_the_workers_log(tmp_path: Path) -> None:
    stored = Stored(line=3, body=b"{}", agent=WEATHER_AGENT, environment=WEATHER, reward=1.0, task_index=0,
                    rollout_index=0)  # fmt: skip
    started = _unserved(stored, "rows.jsonl", tmp_path / "out_workers.log")
    assert started.message == (
        f"rows.jsonl:3: no worker serves gym.env.{WEATHER}.verify: the worker verify started for it "
        f"stopped serving it (see {tmp_path / 'out_workers.log'})"
    )
    on_a_bus = _unserved(stored, "rows.jsonl", None)
    assert on_a_bus.message.endswith(f"start one with `gym-runner serve {WEATHER}`")


def test_a_misspelt_agent_is_refused_before_anything_starts(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "rows.jsonl", [{"response": RESPONSE}])
    done = run_cli(
        "verify", "-i", str(source), "-o", str(tmp_path / "out.jsonl"), "--agent", "mcqa_simpel_agent"
    )
    assert done.returncode == 2, done.stderr
    assert "error: --agent mcqa_simpel_agent: not an agent (did you mean mcqa_simple_agent?)" in done.stderr
    assert (
        "started embedded nats-server" not in done.stderr and not (tmp_path / "out_failures.jsonl").exists()
    )


def test_without_agent_every_unnamed_row_fails_with_its_line(tmp_path: Path) -> None:
    task = json.loads((EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()[0])
    source = write_jsonl(tmp_path / "unnamed.jsonl", [nemo_gym_rollout(task, n, 1.0) for n in range(2)])
    done = run_cli("verify", "-i", str(source), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 4, done.stderr  # no row could be verified
    failures = read_jsonl(tmp_path / "out_failures.jsonl")
    assert [row["_ng_failure_message"] for row in failures] == [
        f"{source}:{n}: field `agent_ref`: missing, and no --agent was given" for n in (1, 2)
    ]
    assert read_jsonl(tmp_path / "out.jsonl") == []


# --- bad rows, and out-of-order verdicts, with workers already on the bus ---


async def test_bad_rows_go_to_failures_by_line_and_the_rest_are_verified(
    graded: ServiceHost, nats_url: str, tmp_path: Path
) -> None:
    await graded.add(environment_service(GRADED, MemoryState()))
    weather_task = json.loads((EXAMPLES / f"{WEATHER}.jsonl").read_text().splitlines()[0])
    source = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            graded_row(1, expected=0.5, stored=0.5),
            "{oops",
            {k: v for k, v in graded_row(3, 1.0, 1.0).items() if k != "response"},
            {k: v for k, v in graded_row(4, 1.0, 1.0).items() if k != "agent_ref"},
            graded_row(5, 1.0, 1.0, agent_ref={"name": "mystery_agent"}),
            graded_row(6, expected=None, stored=1.0),
            {**nemo_gym_rollout(weather_task, 7, 1.0), "agent_ref": {"name": WEATHER_AGENT}},
            graded_row(8, expected=1.0, stored=0.0),
        ],
    )
    out = tmp_path / "mixed_out.jsonl"
    report = await verify_rollouts(VerifyOptions(input=source, output=out, nats_url=nats_url), ProgressView())
    assert (report.rows, report.agreed, report.disagreed, report.failed) == (8, 1, 1, 6)
    rescored = read_jsonl(out)
    assert [(row["index"], row["reward"], row["verdict"]) for row in rescored] == [
        (1, 0.5, "graded 1"),
        (8, 1.0, "graded 8"),
    ]
    failures = read_jsonl(tmp_path / "mixed_out_failures.jsonl")
    assert [row["_ng_input_line"] for row in failures] == [2, 3, 4, 5, 6, 7]
    assert [row["_ng_failure_class"] for row in failures] == [
        "invalid_input", "invalid_input", "invalid_input", "unknown_agent", "verify_failed", "no_worker",
    ]  # fmt: skip
    messages = [str(row["_ng_failure_message"]) for row in failures]
    assert messages[0].startswith(f"{source}:2: not a JSON object")
    assert messages[1].startswith(f"{source}:3: field `response`: missing")
    assert messages[2].startswith(f"{source}:4: field `agent_ref`: missing, and no --agent was given")
    assert messages[3].startswith(f"{source}:5: field `agent_ref`: agent 'mystery_agent' has no built-in")
    assert messages[4].startswith(f"{source}:6: field `expected`: verify failed (bad_request)")
    assert messages[5] == (
        f"{source}:7: no worker serves gym.env.{WEATHER}.verify: start one with `gym-runner serve {WEATHER}`"
    )
    assert report.failures == messages
    [disagreement] = read_jsonl(tmp_path / "mixed_out_disagreements.jsonl")
    assert (disagreement["_ng_input_line"], disagreement["_ng_task_index"]) == (8, 8)
    assert [d.describe() for d in report.disagreements] == [
        f"{source}:8 (task 8, rollout 0): stored 0.0, new 1.0"
    ]


async def test_a_judge_hiccup_is_tried_again_and_the_row_verified(
    graded: ServiceHost, nats_url: str, tmp_path: Path
) -> None:
    calls: list[int] = []

    async def flaky(request: Graded, session: Session) -> GradedResult:
        calls.append(request.index)
        if calls.count(request.index) == 1 and request.index == 1:
            raise UpstreamFailed("judge endpoint answered HTTP 503")
        return GradedResult(reward=request.expected, verdict="ok")

    env = Environment(name="graded", verify=flaky, verify_request=Graded, agents=("graded_agent",))
    await graded.add(environment_service(env, MemoryState()))
    source = write_jsonl(tmp_path / "flaky.jsonl", [graded_row(i, 1.0, 1.0) for i in range(3)])
    out = tmp_path / "flaky_out.jsonl"
    report = await verify_rollouts(VerifyOptions(input=source, output=out, nats_url=nats_url), ProgressView())
    assert (report.agreed, report.failed) == (3, 0)
    assert sorted(calls) == [0, 1, 1, 2]  # row 1 was verified twice: the 503, then its verdict


class _Reversing:
    """A verifier whose verdicts come back in reverse order within each group of `group` rows:
    row i answers only after row i+1 has, so completion order is never input order."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.answered: dict[int, asyncio.Event] = {}
        self.order: list[int] = []
        self.sessions: set[str] = set()
        self.running = 0
        self.peak = 0

    def event(self, index: int) -> asyncio.Event:
        return self.answered.setdefault(index, asyncio.Event())

    async def verify(self, request: Graded, session: Session) -> GradedResult:
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.sessions.add(session.id)
        if (request.index + 1) % self.group:
            await asyncio.wait_for(self.event(request.index + 1).wait(), 10)
        self.order.append(request.index)
        self.running -= 1
        self.event(request.index).set()
        return GradedResult(reward=request.expected, verdict=f"graded {request.index}")


async def test_rows_are_written_in_input_order_when_verdicts_arrive_out_of_order(
    graded: ServiceHost, nats_url: str, tmp_path: Path
) -> None:
    reversing = _Reversing(group=4)
    env = Environment(name="graded", verify=reversing.verify, verify_request=Graded, agents=("graded_agent",))
    await graded.add(environment_service(env, MemoryState()))
    rows = [graded_row(i, expected=i / 100, stored=i / 100) for i in range(24)]
    source = write_jsonl(tmp_path / "many.jsonl", rows)
    out = tmp_path / "ordered.jsonl"
    options = VerifyOptions(input=source, output=out, concurrency=8, nats_url=nats_url)
    report = await verify_rollouts(options, ProgressView())
    for group in range(0, 24, 4):  # verdicts did arrive out of order: each group backwards
        assert [i for i in reversing.order if group <= i < group + 4] == [
            group + 3,
            group + 2,
            group + 1,
            group,
        ]
    assert [row["index"] for row in read_jsonl(out)] == list(range(24))
    assert (report.agreed, report.disagreed, report.failed) == (24, 0, 0)
    assert reversing.peak <= 8  # never more rows in flight than --concurrency
    assert len(reversing.sessions) == 24  # a fresh session per row


# --- the command line ---


def test_verify_help_has_an_example() -> None:
    done = run_cli("verify", "--help")
    assert done.returncode == 0 and "gym-runner verify -i" in done.stdout


def test_verify_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "x.jsonl", [graded_row(0, 1.0, 1.0)])
    done = run_cli("verify", "-i", str(source), "-o", str(source))
    assert done.returncode == 1 and "would overwrite an input file" in " ".join(done.stderr.split())
    assert read_jsonl(source) == [graded_row(0, 1.0, 1.0)]
    inputs = write_jsonl(tmp_path / "inputs.jsonl", [graded_row(0, 1.0, 1.0)])
    done = run_cli("verify", "-i", str(source), "--inputs", str(inputs), "-o", str(inputs))
    assert done.returncode == 1 and "would overwrite an input file" in " ".join(done.stderr.split())
    missing = run_cli("verify", "-i", str(source), "--inputs", str(tmp_path / "nope.jsonl"), "-o", "o.jsonl")
    assert missing.returncode == 1 and "--inputs file not found" in " ".join(missing.stderr.split())


def solved_counter(rollout: dict[str, Any]) -> dict[str, Any]:
    """A collected counter rollout with a hand-written right answer in place of the scripted
    policy's: one increment to the expected count, then a message; its stored reward 1.0."""
    step = json.dumps({"count": rollout["expected_count"] - rollout["initial_count"]})
    rollout["response"]["output"] = [
        {"type": "function_call", "call_id": "c1", "name": "increment_counter", "arguments": step},
        {"type": "function_call_output", "call_id": "c1", "output": '{"success":true}'},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]
    return {**rollout, "reward": 1.0}


def test_judged_rows_are_verified_by_a_judge_the_embedded_default_serves(tmp_path: Path) -> None:
    """equivalence_llm_judge calls a judge model; re-verifying starts one (the offline policy)."""
    source = tmp_path / "judged.jsonl"
    collected = tmp_path / "judged_out.jsonl"
    rows = [
        line for line in (EXAMPLES / "equivalence_llm_judge.jsonl").read_text().splitlines() if line.strip()
    ]
    source.write_text("\n".join(rows[:2]) + "\n")
    agent = ["--agent", "equivalence_llm_judge_simple_agent"]
    assert run_cli("collect", "-i", str(source), "-o", str(collected), *agent).returncode == 0
    rescored = tmp_path / "rescored.jsonl"
    done = run_cli("verify", "-i", str(collected), "-o", str(rescored), *agent)
    assert done.returncode == 0, done.stderr
    assert "2 agree with the stored reward" in done.stderr
    for row in (json.loads(line) for line in rescored.read_text().splitlines()):
        assert row["judge_evaluations"] and "_ng_failure_judge_error" not in row


# --- NeMo Gym rollouts without their task fields, joined with the materialized inputs ---

MCQA_AGENT = {"type": "responses_api_agents", "name": "mcqa_simple_agent"}
TASK_FIELDS = ("options", "expected_answer", "grading_mode", "uuid")


def nemo_gym_mcqa_rollout(
    row: dict[str, Any], letter: str, reward: float, keyed: bool = True
) -> dict[str, Any]:
    """A NeMo Gym mcqa rollout with its task fields left out: the request written back with
    every default spelled out, the response, the stored reward and (if `keyed`) the indices."""
    params = row["responses_create_params"]
    rollout = {
        "responses_create_params": {
            **dict.fromkeys(_NULL_PARAMS),
            "input": [{**item, "type": "message"} for item in params["input"]],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
        "response": {**RESPONSE, "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"\\boxed{{{letter}}}"}]}
        ]},
        "reward": reward,
        "agent_ref": MCQA_AGENT,
    }  # fmt: skip
    if keyed:
        rollout |= {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"]}
    return rollout


def test_nemo_gym_rollouts_without_task_fields_are_joined_with_their_inputs_and_rescored(
    tmp_path: Path,
) -> None:
    tasks = [json.loads(line) for line in (EXAMPLES / "mcqa.jsonl").read_text().splitlines() if line]
    materialized = [
        {**task, "agent_ref": MCQA_AGENT, "_ng_task_index": t, "_ng_rollout_index": r}
        for t, task in enumerate(tasks)
        for r in (0, 1)
    ]
    inputs = write_jsonl(tmp_path / "mcqa_materialized_inputs.jsonl", materialized)
    # Rollout 0 of each task answers right, rollout 1 wrong; in completion order, not input order.
    rows = [
        nemo_gym_mcqa_rollout(m, m["expected_answer"] if m["_ng_rollout_index"] == 0 else "A", 0.0)
        for m in reversed(materialized)
    ]
    for row in rows:
        row["reward"] = 1.0 if row["_ng_rollout_index"] == 0 else 0.0
    rows[0]["reward"] = 1.0  # task 4, rollout 1: a stored reward the verifier does not give
    rows[1] = nemo_gym_mcqa_rollout(materialized[8], "E", 1.0, keyed=False)  # no indices: joined by prompt
    other_run = [{"role": "user", "content": "a question of another run"}]
    stray = {**materialized[0], "responses_create_params": {"input": other_run}}
    rows.append(nemo_gym_mcqa_rollout({**stray, "_ng_task_index": 99}, "B", 1.0))
    source = write_jsonl(tmp_path / "mcqa.jsonl", rows)
    assert not any(field in row for row in rows for field in TASK_FIELDS)

    out = tmp_path / "rescored.jsonl"
    done = run_cli("verify", "-i", str(source), "--inputs", str(inputs), "-o", str(out))
    assert done.returncode == 3, done.stderr  # disagreements, an unmatched row
    assert (
        f"Joined with {inputs} (10 input rows): 9 by task and rollout index, 1 by prompt, 1 not matched"
        in (done.stderr)
    )
    assert "9 agree with the stored reward, 1 disagree; 1 could not be verified" in done.stderr
    assert f"{source}:1 (task 4, rollout 1): stored 1.0, new 0.0" in done.stderr
    rescored = read_jsonl(out)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in rescored] == [
        (t, k, 1.0 if k == 0 else 0.0) for t in range(4, -1, -1) for k in (1, 0)
    ]
    for row in rescored:  # the task fields come from the inputs, the answer from the rollout
        task = tasks[row["_ng_task_index"]]
        assert {field: row[field] for field in TASK_FIELDS} == {field: task[field] for field in TASK_FIELDS}
        assert row["extracted_answer"] == (task["expected_answer"] if row["_ng_rollout_index"] == 0 else "A")
    [unmatched] = read_jsonl(tmp_path / "rescored_failures.jsonl")
    assert unmatched["_ng_failure_class"] == "unmatched_input" and unmatched["_ng_input_line"] == 11
    assert unmatched["_ng_failure_message"] == (
        f"{source}:11: no row of {inputs.name} has _ng_task_index 99 and _ng_rollout_index 0, nor its prompt"
    )

    without = run_cli("verify", "-i", str(source), "-o", str(tmp_path / "unjoined.jsonl"))
    assert without.returncode == 3, without.stderr
    assert "4 agree with the stored reward, 7 disagree" in without.stderr  # no task fields: every answer is 0
