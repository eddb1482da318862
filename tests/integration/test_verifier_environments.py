"""mcqa, math_with_judge and equivalence_llm_judge collected together through a real bus, with
the offline policy as the policy and as the judge, and their per-agent metrics. What the scripted
policy scores is not asserted; a right answer is a hand-written response."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gymbus.bus import (
    Connection,
    ServeOptions,
    ServiceHost,
    environment_service,
    model_service,
    serve_functions,
)
from gymbus.bus.hosting import run_rollout
from gymbus.functions import MemoryState, ModelFunction, registry
from gymbus.functions.environments.equivalence_llm_judge import JUDGE_PROMPT
from gymbus.functions.models.offline import offline_policy
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.runner import CollectOptions, ProgressView, collect
from gymbus.schemas import BadRequest, ContentPart, Item, Response, ResponsesCreateParams
from tests.conftest import EXAMPLES
from tests.integration.test_collect import read_jsonl, run_cli

AGENTS = {
    "mcqa": "mcqa_simple_agent",
    "math_with_judge": "math_with_judge_simple_agent",
    "equivalence_llm_judge": "equivalence_llm_judge_simple_agent",
}


def mixed_input(path: Path) -> Path:
    """The three environments' example rows, interleaved, each with its `agent_ref`."""
    per_env: list[list[dict[str, Any]]] = []
    for env, agent in AGENTS.items():
        rows = [json.loads(line) for line in (EXAMPLES / f"{env}.jsonl").read_text().splitlines() if line]
        per_env.append(
            [{**row, "agent_ref": {"type": "responses_api_agents", "name": agent}} for row in rows]
        )
    lines = [json.dumps(row) for group in zip(*per_env, strict=False) for row in group]
    lines += [json.dumps(row) for group in per_env for row in group[len(min(per_env, key=len)) :]]
    path.write_text("\n".join(lines) + "\n")
    return path


def by_agent(metrics_file: Path) -> dict[str, dict[str, Any]]:
    return {entry["agent_ref"]["name"]: entry for entry in json.loads(metrics_file.read_text())}


def test_one_command_collects_three_verifier_environments_with_per_agent_metrics(tmp_path: Path) -> None:
    source = mixed_input(tmp_path / "verifiers.jsonl")
    out = tmp_path / "results" / "verifiers.jsonl"
    done = run_cli("collect", "-i", str(source), "-o", str(out), "--num-repeats", "2", timeout=180)
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert len(rows) == 15 * 2 and read_jsonl(tmp_path / "results" / "verifiers_failures.jsonl") == []

    metrics = by_agent(tmp_path / "results" / "verifiers_aggregate_metrics.json")
    mcqa = metrics["mcqa_simple_agent"]
    assert set(mcqa["key_metrics"]) == {
        "mean/reward",
        "pass@1[avg-of-2]/accuracy",
        "pass@1[avg-of-2]/no_answer",
        "pass@2/no_answer",
        "majority@2/accuracy",
        "pass@1/accuracy",
    }
    mean = sum(r["reward"] for r in rows if r["agent_ref"]["name"] == "mcqa_simple_agent") / 10
    assert mcqa["key_metrics"]["pass@1[avg-of-2]/accuracy"] == pytest.approx(100 * mean)
    assert mcqa["agent_metrics"]["pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == 0.0  # deterministic
    assert [g["num_rollouts"] for g in mcqa["group_level_metrics"]] == [2] * 5

    math = metrics["math_with_judge_simple_agent"]
    assert {"pass@1[avg-of-2]/symbolic_accuracy", "majority@2/symbolic_accuracy"} <= set(math["key_metrics"])
    assert "mean/input_tokens" in math["key_metrics"]
    assert not any("judge_accuracy" in key for key in math["agent_metrics"])  # the judge is off

    judge = metrics["equivalence_llm_judge_simple_agent"]  # generic metrics: NeMo Gym has no others
    assert "mean/reward" in judge["key_metrics"] and judge["group_level_metrics"] == []
    # One line per agent, rounded, never rich markup; metrics that agree are named together.
    mean = mcqa["key_metrics"]["mean/reward"]
    assert (
        f"mcqa_simple_agent: 10 rollouts, mean reward {mean:.3f}; accuracy pass@1[avg-of-2] = " in done.stderr
    )

    judged = [r for r in rows if r["agent_ref"]["name"] == "equivalence_llm_judge_simple_agent"]
    for row in judged:  # each judge call went over the bus with NeMo Gym's template filled in
        [evaluation] = row["judge_evaluations"]
        [message] = evaluation["responses_create_params"]["input"]
        answer = row["response"]["output"][-1]["content"][-1]["text"].strip()
        question = row["responses_create_params"]["input"][-1]["content"]
        filled = JUDGE_PROMPT.format(
            question=question, expected_answer=row["expected_answer"], generated_answer=answer
        )
        assert message["content"] == filled
        assert row["reward"] == float(evaluation["verdict_label"] == "[[A=B]]")


async def broken_judge(params: ResponsesCreateParams) -> Response:
    raise BadRequest("the judge endpoint rejected the request (HTTP 400)")


async def test_judge_settings_and_a_judge_outage(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: ServiceHost
) -> None:
    monkeypatch.setenv("GYMBUS_MATH_WITH_JUDGE", '{"should_use_judge": true}')  # judged by the offline policy
    monkeypatch.setenv("GYMBUS_EQUIVALENCE_LLM_JUDGE", '{"judge_model_server": "broken"}')
    await host.add(model_service("broken", "broken", broken_judge))  # fails at once: no retries
    functions = (*AGENTS, *AGENTS.values(), "offline")
    stop = asyncio.Event()
    workers = asyncio.create_task(serve_functions(ServeOptions(functions=functions), nats_url, stop))
    try:
        await asyncio.sleep(0.5)
        out = tmp_path / "judged.jsonl"
        options = CollectOptions(input=mixed_input(tmp_path / "in.jsonl"), output=out, nats_url=nats_url)
        result = await collect(options, ProgressView(), asyncio.Event())
    finally:
        stop.set()
        await workers
    assert (result.written, result.failed) == (5 + 5, 5)
    failures = read_jsonl(tmp_path / "judged_failures.jsonl")
    assert {f["_ng_failure_class"] for f in failures} == {"judge_failed"}
    assert all("HTTP 400" in str(f["_ng_failure_judge_error"]) for f in failures)

    math_rows = [r for r in read_jsonl(out) if r["agent_ref"]["name"] == "math_with_judge_simple_agent"]
    for row in math_rows:  # the judge is asked exactly when math-verify says no
        assert (row["judge_evaluations"] is None) == (row["library_reward"] == 1.0)
    metrics = by_agent(tmp_path / "judged_aggregate_metrics.json")
    assert "pass@1/judge_accuracy" in metrics["math_with_judge_simple_agent"]["key_metrics"]
    assert metrics["equivalence_llm_judge_simple_agent"]["agent_metrics"] == {}


def answering(text: str) -> ModelFunction:
    """A hand-written policy: every turn, a message saying `text`."""

    async def generate(params: ResponsesCreateParams) -> Response:
        content = [ContentPart(type="output_text", text=text)]
        message = Item(type="message", role="assistant", content=content)
        return Response(id="r", created_at=0, model="m", output=[message])

    return generate


@pytest.mark.parametrize(("answer", "reward"), [("The Sun.", 1.0), ("the moon", 0.0)])
async def test_the_offline_judge_compares_a_hand_written_answer_over_the_bus(
    nc: Connection, host: ServiceHost, monkeypatch: pytest.MonkeyPatch, answer: str, reward: float
) -> None:
    monkeypatch.setenv("GYMBUS_EQUIVALENCE_LLM_JUDGE", '{"judge_model_server": "judge"}')
    await host.add(environment_service(ENVIRONMENTS["equivalence_llm_judge"], MemoryState(), nc))
    await host.add(model_service("scripted", "policy", answering(answer)))
    await host.add(model_service("offline", "judge", offline_policy))
    row = json.loads((EXAMPLES / "equivalence_llm_judge.jsonl").read_text().splitlines()[-1])
    assert row["expected_answer"] == "the sun"
    agent = registry.AGENTS["equivalence_llm_judge_simple_agent"]
    result = json.loads(await run_rollout(nc, agent, json.dumps(row).encode(), deadline=time.time() + 60))
    assert result["reward"] == reward
    assert result["judge_evaluations"][0]["verdict_label"] == ("[[A=B]]" if reward else "[[A!=B]]")
