"""`gym-runner check`: a deliberately broken environment is told what is broken, item by item;
a good one passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from msgspec import Struct

from gymbus import bus
from gymbus.bus import Connection, Endpoint, Handler, ServiceSpec, environment_service, subjects
from gymbus.functions import Environment, MemoryState, Session, tool
from gymbus.runner.checks._check import CheckItem, check_environment
from gymbus.runner.checks._contract import EnvironmentContract
from gymbus.schemas import DEFAULT_TIMEOUTS, SeedRequest, VerifyRequest, VerifyResult

pytestmark = pytest.mark.timeout(90)

TIMEOUTS = replace(DEFAULT_TIMEOUTS, check=5.0)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class City(Struct, kw_only=True):
    city: str


class Numbers(Struct, kw_only=True):
    a: float
    b: float


class Task(SeedRequest, kw_only=True):
    expected_city: str


@tool
async def get_weather(args: City, session: Session) -> dict[str, str]:
    return {"city": args.city, "weather": "sunny"}


@tool
async def divide(args: Numbers, session: Session) -> dict[str, float]:
    return {"quotient": args.a / args.b}  # b is 0 in the built argument: ZeroDivisionError


@tool
async def lookup(args: City, session: Session) -> dict[str, str]:
    return {}


async def crashing_seed(request: Task, session: Session) -> None:
    raise KeyError(request.expected_city)


async def malformed_verify(request: VerifyRequest, session: Session) -> VerifyResult:
    return {"score": 1.0}  # type: ignore[return-value]  # what the check is for: no `reward`


BROKEN = Environment(
    name="broken_env",
    verify=malformed_verify,
    seed=crashing_seed,
    seed_request=Task,
    tools=(get_weather, divide, lookup),
)


def _by_name(items: list[CheckItem]) -> dict[str, CheckItem]:
    return {item.what: item for item in items}


def _print(items: list[CheckItem]) -> None:
    print("\n".join(item.describe() for item in items))  # the report, shown with `pytest -s`


async def test_a_broken_environment_is_told_what_is_broken(host: bus.ServiceHost, nc: Connection) -> None:
    """Its seed raises, one tool raises, one declared tool is not served, and its verify
    returns a result without `reward`."""
    served = replace(BROKEN, tools=(get_weather, divide))  # `lookup` declared, never served
    await host.add(environment_service(served, MemoryState()))
    items = await check_environment(bus.Bus.over(nc), EnvironmentContract.of(BROKEN), TIMEOUTS)
    _print(items)
    found = _by_name(items)
    assert found["service"].ok
    assert (
        not found["subjects"].ok and found["subjects"].detail == "not served: gym.env.broken_env.tool.lookup"
    )
    assert not found["seed"].ok and "500 function_failed: seed raised KeyError" in found["seed"].detail
    assert found["tool get_weather"].ok and '"weather":"sunny"' in found["tool get_weather"].detail
    assert not found["tool divide"].ok and "divide raised ZeroDivisionError" in found["tool divide"].detail
    assert (
        not found["tool lookup"].ok
        and found["tool lookup"].detail == "nobody serves gym.env.broken_env.tool.lookup"
    )
    assert not found["verify"].ok and "malformed result: no `reward`" in found["verify"].detail
    assert [item.what for item in items if not item.ok] == [
        "subjects",
        "seed",
        "tool divide",
        "tool lookup",
        "verify",
    ]


def _reply(body: bytes) -> Handler:
    async def handler(data: bytes, headers: Mapping[str, str]) -> bytes:
        return body

    return handler


async def test_an_environment_served_by_another_language_is_checked_against_its_dataset_row(
    host: bus.ServiceHost, nc: Connection
) -> None:
    """No seed subject at all, a tool that answers something that is not JSON, a reward that is
    not a number, and a tool the dataset offers the model that nobody serves."""
    env = "foreign_env"
    endpoints = (
        Endpoint("verify", subjects.env_verify(env), _reply(b'{"reward": "high"}')),
        Endpoint("search", subjects.env_tool(env, "search"), _reply(b"<html>502 Bad Gateway</html>")),
        Endpoint("echo", subjects.env_tool(env, "echo"), _reply(b'{"echo": "hi"}')),
    )
    await host.add(ServiceSpec(env, "environment", endpoints))
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    row = {"responses_create_params": {"input": "Find the capital of France", "tools": [
        {"type": "function", "name": name, "parameters": parameters} for name in ("search", "fetch_page")
    ]}}  # fmt: skip
    items = await check_environment(bus.Bus.over(nc), EnvironmentContract.from_row(env, row), TIMEOUTS)
    _print(items)
    found = _by_name(items)
    assert found["service"].ok
    assert not found["subjects"].ok and "gym.env.foreign_env.seed" in found["subjects"].detail
    assert not found["seed"].ok and found["seed"].detail == "nobody serves gym.env.foreign_env.seed"
    assert not found["tool search"].ok and "the reply is not JSON" in found["tool search"].detail
    assert not found["tool fetch_page"].ok and "nobody serves" in found["tool fetch_page"].detail
    assert found["tool echo"].ok  # served, though the row does not offer it
    assert not found["verify"].ok and "`reward` must be a finite number, got 'high'" in found["verify"].detail


async def test_a_tool_the_row_offers_with_other_fields_or_types_than_it_takes_is_reported(
    host: bus.ServiceHost, nc: Connection
) -> None:
    """The row's hand-written schema says `city` is a number and adds `units`: a model that
    follows it gets only refusals, and the check says so rather than passing on the refusal."""
    env = replace(BROKEN, name="misdeclared_env", seed=None, verify=_rewarding, tools=(get_weather,))
    await host.add(environment_service(env, MemoryState()))
    parameters = {"type": "object", "properties": {"city": {"type": "integer"}, "units": {"type": "string"}}}
    row = {"responses_create_params": {"input": "Weather in 94110?", "tools": [
        {"type": "function", "name": "get_weather", "parameters": parameters}]}}  # fmt: skip
    items = await check_environment(bus.Bus.over(nc), EnvironmentContract.of(env, row), TIMEOUTS)
    _print(items)
    found = _by_name(items)["schema get_weather"]
    assert not found.ok
    assert found.detail == (
        "`units` is offered, but the tool takes no such field; "
        "`city` is offered as integer, but the tool takes string"
    )


async def _rewarding(request: VerifyRequest, session: Session) -> VerifyResult:
    return VerifyResult(reward=1.0)


TWO_ENVIRONMENTS = """
from gymbus.functions import Environment, VerifyResult

async def verify(request, session):
    return VerifyResult(reward=1.0)

FIRST = Environment(name="first_of_two", verify=verify)
SECOND = Environment(name="second_of_two", verify=verify)
"""


def test_the_command_takes_one_environment_of_a_file_that_defines_two(
    tmp_path: Path, no_nats_url: None
) -> None:
    source = tmp_path / "two_envs.py"
    source.write_text(TWO_ENVIRONMENTS)

    def check(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gymbus.runner", "check", target], capture_output=True,
                              text=True, timeout=60, check=False, cwd=tmp_path)  # fmt: skip

    both = check("two_envs.py")
    assert both.returncode == 1
    assert "defines 2 environments: first_of_two, second_of_two; pick one as two_envs.py:NAME" in both.stderr
    one = check("two_envs.py:second_of_two")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "second_of_two: all 4 checks passed" in one.stderr


async def test_an_environment_nobody_serves_fails_at_its_ping(nc: Connection) -> None:
    items = await check_environment(
        bus.Bus.over(nc), EnvironmentContract.from_row("nobody_serves_this", None), TIMEOUTS
    )
    assert not _by_name(items)["service"].ok and not _by_name(items)["seed"].ok


def test_the_command_passes_a_good_environment(tmp_path: Path, no_nats_url: None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gymbus.runner", "check", "example_single_tool_call",
         "--input", str(EXAMPLES / "example_single_tool_call.jsonl")],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k != "NATS_URL"},
    )  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split(maxsplit=1)[-1] for line in lines] == [
        "service",
        "subjects",
        "seed",
        "tool get_weather",
        "schema get_weather",
        "verify",
    ]
    assert all(line.startswith("OK") for line in lines)
    assert "all 6 checks passed" in done.stderr
    assert json.loads(lines[3].split("replied ", 1)[1])["city"]  # the city the prompt names


def test_the_command_exits_1_and_names_a_missing_environment(no_nats_url: None) -> None:
    done = subprocess.run([sys.executable, "-m", "gymbus.runner", "check", "no_such_env"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert (
        done.returncode == 1
        and "'no_such_env' is neither a built-in nor an installed environment" in done.stderr
    )
