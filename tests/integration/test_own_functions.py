"""A user's own agent and model go where a built-in goes: written in files of their own
(nothing installed), collected with `collect` alone on the embedded default, and the
rollouts re-verified with `verify`, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gymbus.runner.scaffold import write_package

pytestmark = pytest.mark.timeout(120)

RUNNER = [sys.executable, "-m", "gymbus.runner"]

ENVIRONMENT = '''
"""A counter kept per session; the reward is for the expected count, read back from the
response (so a stored rollout re-verifies without its session)."""

from __future__ import annotations

import msgspec
from msgspec import Struct

from gymbus.functions import Environment, Response, SeedRequest, Session, VerifyRequest, VerifyResult, tool


class Count(Struct, kw_only=True):
    value: int = 0


class NoArguments(Struct, kw_only=True):
    pass


class CountVerify(VerifyRequest, kw_only=True):
    expected_count: int


class CountVerdict(VerifyResult, kw_only=True):
    final_count: int


async def seed(request: SeedRequest, session: Session) -> None:
    await session.save(Count())


async def increment(args: NoArguments, session: Session) -> Count:
    count = Count(value=((await session.load(Count)) or Count()).value + 1)
    await session.save(count)
    return count


def final_count(response: Response) -> int:
    outputs = [item.output for item in response.output if item.type == "function_call_output"]
    return msgspec.json.decode(outputs[-1], type=Count).value if outputs else 0


async def verify(request: CountVerify, session: Session) -> CountVerdict:
    final = final_count(request.response)
    return CountVerdict(reward=float(final == request.expected_count), final_count=final)


ENVIRONMENT = Environment(
    name="counter", tools=(tool(increment),), seed=seed, verify=verify, verify_request=CountVerify
)
'''

AGENT = '''
"""An agent of my own: seed, then model and tools until the model answers, then verify."""

from __future__ import annotations

import msgspec
from counter_env import ENVIRONMENT

from gymbus.functions import Agent, Calls, Item, ResponsesCreateParams


async def run(row: bytes, calls: Calls, max_steps: int) -> bytes:
    task = msgspec.json.decode(row)
    await calls.seed(row)
    params = msgspec.convert(task["responses_create_params"], ResponsesCreateParams)
    generated: list[Item] = []
    for _ in range(max_steps):
        response = await calls.model(msgspec.structs.replace(params, input=[*params.input, *generated]))
        generated += response.output
        called = [item for item in response.output if item.type == "function_call"]
        if not called:
            break
        for call in called:
            output = await calls.tool(call.name, call.arguments)
            generated.append(Item(type="function_call_output", call_id=call.call_id, output=output))
    response = msgspec.structs.replace(response, output=generated)
    verdict = msgspec.json.decode(await calls.verify(row, response))
    return msgspec.json.encode({**task, **verdict, "response": response, "counted_by": "my agent"})


AGENT = Agent(name="counter_agent", rollout=run, environment=ENVIRONMENT.name, max_steps=5)
'''

MODEL = '''
"""A model of my own: calls `increment` twice, then says it is done."""

from __future__ import annotations

from gymbus.functions import Item, Model, ModelOptions, Response, ResponsesCreateParams


def make(options: ModelOptions):
    async def generate(params: ResponsesCreateParams) -> Response:
        items = params.input if isinstance(params.input, list) else []
        done = sum(1 for item in items if item.type == "function_call_output")
        if done < 2:
            call = Item(type="function_call", id=f"fc_{done}", call_id=f"call_{done}", name="increment",
                        arguments="{}")
            return Response(id=f"resp_{done}", created_at=0, model="counting", output=[call])
        answer = Item(type="message", id="msg", role="assistant", content="counted twice", status="completed")
        return Response(id="resp_end", created_at=0, model="counting", output=[answer])

    return generate


MODEL = Model(name="counting_model", make=make)
'''


def _row(expected: int) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Count, please."}]},
        "expected_count": expected,
        "agent_ref": {"type": "responses_api_agents", "name": "counter_agent"},
    }


@pytest.fixture
def author(tmp_path: Path) -> Path:
    """An author's folder: an environment, an agent and a model file, and task rows."""
    for name, text in (
        ("counter_env.py", ENVIRONMENT),
        ("counter_agent.py", AGENT),
        ("counting_model.py", MODEL),
    ):
        (tmp_path / name).write_text(textwrap.dedent(text))
    rows = [_row(2), _row(2), _row(3)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return tmp_path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("NATS_", "POLICY_"))}
    return subprocess.run([*RUNNER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=90)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_own_agent_and_model_collect_on_the_embedded_default_and_re_verify(author: Path) -> None:
    collected = _run(
        ["collect", "-i", "tasks.jsonl", "-o", "out/rollouts.jsonl",
         "--agent", "counter_agent.py", "--model", "counting_model.py"],
        author,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stdout + collected.stderr
    rows = sorted(_read(author / "out" / "rollouts.jsonl"), key=lambda row: row["_ng_task_index"])
    assert [row["counted_by"] for row in rows] == ["my agent"] * 3  # the agent of the file ran them
    assert {row["response"]["model"] for row in rows} == {"counting"}  # and the model of the file
    assert [(row["final_count"], row["reward"]) for row in rows] == [(2, 1.0), (2, 1.0), (2, 0.0)]

    verified = _run(
        ["verify", "-i", "out/rollouts.jsonl", "-o", "out/rescored.jsonl", "--agent", "counter_agent.py"],
        author,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "3 agree with the stored reward, 0 disagree" in verified.stderr


def test_rows_naming_an_agent_of_ones_own_without_its_file_say_how_to_give_it(author: Path) -> None:
    collected = _run(["collect", "-i", "tasks.jsonl", "-o", "out/r.jsonl"], author)
    assert collected.returncode == 2, collected.stderr
    assert "counter_agent (3 rollouts): not an agent" in collected.stderr
    assert "an agent of your own is given by its file: --agent path/to/counter_agent.py" in collected.stderr


def test_an_agent_file_with_several_agents_asks_which(author: Path) -> None:
    (author / "two_agents.py").write_text(
        "from counter_agent import AGENT, run\nfrom gymbus.functions import Agent\n"
        "OTHER = Agent(name='other_agent', rollout=run, environment='counter')\n"
    )
    collected = _run(
        ["collect", "-i", "tasks.jsonl", "-o", "out/r.jsonl", "--agent", "two_agents.py"], author
    )
    assert collected.returncode == 2, collected.stderr
    assert "defines 2 agents: counter_agent, other_agent; pick one as two_agents.py:NAME" in collected.stderr


def test_a_model_name_without_its_endpoint_is_refused_saying_what_model_means(author: Path) -> None:
    collected = _run(["collect", "-i", "tasks.jsonl", "-o", "out/r.jsonl", "--model", "gpt_4o"], author)
    assert collected.returncode == 2, collected.stderr
    assert "--model gpt_4o: no model function of that name" in collected.stderr
    assert "give its URL with --model-url" in collected.stderr


def test_the_scaffolds_environment_re_verifies_its_stored_rollouts(tmp_path: Path) -> None:
    root = write_package("shelf_tally", tmp_path).root
    environment = str(root / "shelf_tally" / "environment.py")  # its agent: shelf_tally_simple_agent
    collected = _run(
        ["collect", "-i", "data/example.jsonl", "-o", "out/r.jsonl", "--agent", environment], root
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert 1.0 in {row["reward"] for row in _read(root / "out" / "r.jsonl")}  # one its session earned

    verified = _run(["verify", "-i", "out/r.jsonl", "-o", "out/v.jsonl", "--agent", environment], root)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "5 agree with the stored reward, 0 disagree" in verified.stderr


SESSION_BOUND = """
from gymbus.functions import Environment, VerifyResult


async def verify(request, session):
    return VerifyResult(reward=float(await session.state.get(session.id) is not None))


ENVIRONMENT = Environment(name="sandboxed", verify=verify, agents=("sandboxed_simple_agent",), re_verifiable=False)
"""


def test_a_verify_that_needs_its_session_is_reported_not_re_verifiable_not_as_disagreeing(
    tmp_path: Path,
) -> None:
    (tmp_path / "sandboxed.py").write_text(SESSION_BOUND)
    response = {"id": "r", "created_at": 0, "model": "m", "output": []}
    stored = {**_row(1), "agent_ref": {"type": "responses_api_agents", "name": "sandboxed_simple_agent"},
              "response": response, "reward": 1.0}  # fmt: skip
    (tmp_path / "stored.jsonl").write_text(json.dumps(stored) + "\n")
    verified = _run(
        ["verify", "-i", "stored.jsonl", "-o", "out/v.jsonl", "--agent", "sandboxed.py"], tmp_path
    )
    assert verified.returncode == 4, verified.stderr  # no row verified
    assert "0 agree with the stored reward, 0 disagree; 1 could not be verified" in verified.stderr
    assert "not re-verifiable: sandboxed says its verify needs the rollout's own session" in verified.stderr
    (failure,) = _read(tmp_path / "out" / "v_failures.jsonl")
    assert "not_re_verifiable" in json.dumps(failure)
