"""`gym-runner talk` goes where `collect` goes: on the embedded default (it starts the
environment and policy the agent needs), with an agent given by its file, and on a locked
bus with the agent's own credentials."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._cluster import NatsServers, wait_until

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "gymbus.runner"]
ENV = "example_single_tool_call"
AGENT = "example_single_tool_call_simple_agent"


def _environ(**extra: str) -> dict[str, str]:
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("NATS_", "POLICY_"))}
    return {**clean, **extra}


def _talk(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, "talk", *args], env=env, capture_output=True, text=True, timeout=90, cwd=REPO
    )


def test_talk_on_the_embedded_default_starts_what_the_agent_needs() -> None:
    done = _talk(AGENT, "what's it like in sf?", env=_environ())
    assert done.returncode == 0, done.stderr
    assert "tool call: get_weather(" in done.stderr and "tool output:" in done.stderr
    assert "weather" in done.stdout.lower()


def test_talk_takes_an_agent_by_the_file_that_defines_it() -> None:
    environment = (
        "examples/shopping_list/shopping_list/environment.py"  # its agent: shopping_list_simple_agent
    )
    done = _talk(environment, "Please add milk to my shopping list.", env=_environ())
    assert done.returncode == 0, done.stderr
    assert "tool call: add_item(" in done.stderr and 'tool output: {"items":[' in done.stderr


def test_an_unknown_agent_is_bad_usage_saying_how_to_give_ones_own() -> None:
    done = _talk("example_single_tool_call_simple_agnt", "hi", env=_environ())
    assert done.returncode == 2, done.stderr
    assert f"did you mean {AGENT}" in done.stderr and "gym-runner talk path/to/my_agent.py" in done.stderr


@pytest.fixture
def locked_bus(tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """A bus locked by `secure init`, with the environment and the policy served there."""
    secrets = tmp_path / "secrets"
    made = subprocess.run([*RUNNER, "secure", "init", "--env", ENV, "--model", "policy", "--out", str(secrets)],
                          env=_environ(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    credentials = {path.stem: path for path in (secrets / "credentials").glob("*.nk")}
    authorization = (secrets / "nats.conf").read_text().split("authorization", 1)[1]
    with NatsServers(tmp_path, size=1, extra="authorization" + authorization) as servers:
        url = servers.url(0)
        workers = []
        for function, role in ((ENV, f"env-{ENV}"), ("offline", "model-policy")):
            log = tmp_path / f"{role}.log"
            with open(log, "wb") as out:
                env = _environ(NATS_URL=url, NATS_NKEY=str(credentials[role]))
                workers.append(subprocess.Popen([*RUNNER, "serve", function], env=env, stdout=out,
                                                stderr=subprocess.STDOUT))  # fmt: skip
        try:
            for role in (f"env-{ENV}", "model-policy"):
                path = tmp_path / f"{role}.log"
                wait_until(lambda path=path: "ready:" in path.read_text(errors="replace"), 60, role)  # type: ignore[misc]
            yield url, credentials
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(30)


def test_talk_on_a_locked_bus_runs_with_the_agents_own_credentials(
    locked_bus: tuple[str, dict[str, Path]],
) -> None:
    url, credentials = locked_bus
    done = _talk(
        AGENT,
        "what's it like in sf?",
        env=_environ(NATS_URL=url, NATS_NKEY=str(credentials[f"agent-{AGENT}"])),
    )
    assert done.returncode == 0, done.stderr
    assert "tool call: get_weather(" in done.stderr and "weather" in done.stdout.lower()


def test_a_model_flag_on_a_shared_bus_is_refused_not_dropped() -> None:
    done = _talk(
        AGENT, "hi", "--model-url", "http://127.0.0.1:9/v1", env=_environ(NATS_URL="nats://127.0.0.1:9")
    )
    assert done.returncode == 2, done.stderr
    assert "--model-url: the policy talk serves itself, on the embedded default" in done.stderr
