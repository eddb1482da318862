"""An environment written outside GymBus, in the user's own package, runs as the built-ins
do: found by name through its entry point (collect's embedded workers, check, secure init on
a locked bus), served from its file, and refused when it clashes with another source.

The package is written to a temporary folder outside the repository and installed with pip
(`--target`, so the shared interpreter's environment is left as it was), then put on the
commands' PYTHONPATH, which is how importlib.metadata sees an installed distribution.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench._cluster import NatsServers, wait_until
from gymbus.runner.security._secure import SecureLayout

pytestmark = pytest.mark.timeout(180)

RUNNER = [sys.executable, "-m", "gymbus.runner"]
ENV = "piggy_bank"
AGENT = "piggy_bank_simple_agent"

ENVIRONMENT = '''
"""A piggy bank: deposits change the session's balance; the reward is for the expected one."""

from __future__ import annotations

from msgspec import Struct

from gymbus.functions import BadRequest, Environment, SeedRequest, Session, VerifyRequest, VerifyResult, tool


class Balance(Struct, kw_only=True):
    balance: int


class PiggySeed(SeedRequest, kw_only=True):
    initial_balance: int = 0


class Deposit(Struct, kw_only=True):
    amount: int


class NoArguments(Struct, kw_only=True):
    pass


class PiggyVerify(VerifyRequest, kw_only=True):
    expected_balance: int


class PiggyVerdict(VerifyResult, kw_only=True):
    final_balance: int


async def seed(request: PiggySeed, session: Session) -> None:
    await session.save(Balance(balance=request.initial_balance))


async def current(session: Session) -> Balance:
    return await session.load(Balance) or Balance(balance=0)


async def deposit(args: Deposit, session: Session) -> Balance:
    if args.amount <= 0:
        raise BadRequest("amount must be positive")
    balance = Balance(balance=(await current(session)).balance + args.amount)
    await session.save(balance)
    return balance


async def get_balance(args: NoArguments, session: Session) -> Balance:
    return await current(session)


async def verify(request: PiggyVerify, session: Session) -> PiggyVerdict:
    final = (await current(session)).balance
    return PiggyVerdict(reward=float(final == request.expected_balance), final_balance=final)


ENVIRONMENT = Environment(
    name="piggy_bank",
    tools=(tool(deposit), tool(get_balance)),
    seed=seed,
    seed_request=PiggySeed,
    verify=verify,
    verify_request=PiggyVerify,
    agents=("piggy_bank_simple_agent",),
    max_steps=4,
)
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "piggy-bank"
version = "0.1.0"
dependencies = ["gymbus"]

[project.entry-points."gymbus.functions"]
piggy_bank = "piggy_bank.environment"

[tool.setuptools]
packages = ["piggy_bank"]
"""

TOOLS = [
    {"type": "function", "name": "deposit", "description": "Put money in the piggy bank.",
     "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}},
    {"type": "function", "name": "get_balance", "description": "How much is in the piggy bank.",
     "parameters": {"type": "object", "properties": {}}},
]  # fmt: skip


def _row(prompt: str, initial: int, expected: int) -> dict[str, object]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": prompt}], "tools": TOOLS},
        "initial_balance": initial,
        "expected_balance": expected,
        "agent_ref": {"type": "responses_api_agents", "name": AGENT},
    }


ROWS = [
    _row("Deposit 5 into my piggy bank.", 0, 5),
    _row("It holds 10. Deposit 3 more.", 10, 13),
    _row("Deposit 7, then tell me the balance.", 1, 8),
]


@dataclass(frozen=True)
class Package:
    source: Path  # the package's folder, as its author has it
    module: Path  # its environment's file
    rows: Path
    installed: dict[str, str]  # a process environment in which the package is installed
    bare: dict[str, str]  # one in which it is not


def _environ(extra_path: str | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
    if extra_path is not None:
        clean["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, clean.get("PYTHONPATH")) if p)
    return clean


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Package:
    root = tmp_path_factory.mktemp("own-environment")
    source = root / "piggy-bank"
    (source / "piggy_bank").mkdir(parents=True)
    (source / "piggy_bank" / "__init__.py").write_text("")
    (source / "piggy_bank" / "environment.py").write_text(textwrap.dedent(ENVIRONMENT))
    (source / "pyproject.toml").write_text(PYPROJECT)
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    site = root / "site-packages"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(source)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    assert list(site.glob("piggy_bank-0.1.0.dist-info/entry_points.txt"))
    return Package(source, source / "piggy_bank" / "environment.py", rows, _environ(str(site)), _environ())


def _run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_rewarded(out: Path) -> None:
    """Every row came back with its reward, by the environment's rule, from the state its
    own tool calls left: the balance the last tool output showed (else the seed's)."""
    rows = _read(out)
    assert len(rows) == len(ROWS)
    for row in rows:
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": AGENT}
        shown = [json.loads(item["output"]) for item in row["response"]["output"]
                 if item["type"] == "function_call_output"]  # fmt: skip
        balances = [output["balance"] for output in shown if "balance" in output]
        assert row["final_balance"] == (balances[-1] if balances else row["initial_balance"]), row
        assert row["reward"] == float(row["final_balance"] == row["expected_balance"]), row


def test_collect_starts_the_installed_agent_found_through_its_entry_point(
    package: Package, tmp_path: Path
) -> None:
    out = tmp_path / "rollouts.jsonl"
    collected = _run(["collect", "-i", str(package.rows), "-o", str(out)], package.installed)
    assert collected.returncode == 0, collected.stderr
    _assert_rewarded(out)
    failures = tmp_path / "rollouts_failures.jsonl"
    assert not failures.exists() or not _read(failures)
    metrics = json.loads((tmp_path / "rollouts_aggregate_metrics.json").read_text())
    assert [entry["agent_ref"]["name"] for entry in metrics] == [AGENT]


def test_serve_takes_the_file_of_an_environment_nobody_installed(
    package: Package, nats_url: str, tmp_path: Path
) -> None:
    env = {**package.bare, "NATS_URL": nats_url}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([*RUNNER, "serve", str(package.module), "offline"], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, cwd=tmp_path)  # fmt: skip
    try:
        wait_until(lambda: "ready:" in log.read_text(errors="replace"), 60, "worker")
        assert f"serving {ENV}, {AGENT}, offline" in log.read_text()
        out_path = tmp_path / "rollouts.jsonl"
        collected = _run(["collect", "-i", str(package.rows), "-o", str(out_path)], env)
        assert collected.returncode == 0, collected.stderr
        _assert_rewarded(out_path)
    finally:
        worker.terminate()
        assert worker.wait(30) == 0, log.read_text()


def test_check_passes_on_the_installed_environment(package: Package) -> None:
    checked = _run(["check", ENV, "--input", str(package.rows)], package.installed)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "tool deposit" in checked.stdout and "tool get_balance" in checked.stdout
    assert f"{ENV}: all" in checked.stderr


def test_a_second_copy_of_an_installed_package_is_refused_naming_both(package: Package) -> None:
    # Installed, and given again as its source file: two modules would define piggy_bank.
    served = _run(["serve", str(package.module)], package.installed, timeout=60)
    assert served.returncode == 1
    message = served.stderr.replace("\n", "")
    assert str(package.module) in message and "already imported from" in message
    assert (
        str(Path(package.installed["PYTHONPATH"].split(os.pathsep)[0]) / "piggy_bank" / "environment.py")
        in message
    )


@pytest.fixture
def locked(package: Package, tmp_path: Path) -> Iterator[tuple[NatsServers, SecureLayout]]:
    secrets = tmp_path / "secrets"
    done = _run(
        ["secure", "init", "--env", ENV, "--model", "policy", "--out", str(secrets)], package.installed
    )
    assert done.returncode == 0, done.stderr
    credentials = {path.stem: path for path in (secrets / "credentials").glob("*.nk")}
    layout = SecureLayout(config=secrets / "nats.conf", helm_values=None, credentials=credentials)
    authorization = layout.config.read_text().split("authorization", 1)[1]
    with NatsServers(tmp_path, size=1, extra="authorization" + authorization) as servers:
        yield servers, layout


def test_secure_init_gives_it_roles_that_collect_on_a_locked_bus(
    package: Package, locked: tuple[NatsServers, SecureLayout], tmp_path: Path
) -> None:
    servers, layout = locked
    creds = layout.credentials
    assert {f"env-{ENV}", f"agent-{AGENT}", "model-policy", "runner"} <= set(creds)

    def env(role: str) -> dict[str, str]:
        return {**package.installed, "NATS_URL": servers.url(0), "NATS_NKEY": str(creds[role])}

    workers = []
    for function, role in ((ENV, f"env-{ENV}"), (AGENT, f"agent-{AGENT}"), ("offline", "model-policy")):
        with open(tmp_path / f"{role}.log", "wb") as log:
            workers.append(subprocess.Popen([*RUNNER, "serve", function], env=env(role), stdout=log,
                                            stderr=subprocess.STDOUT))  # fmt: skip
    try:
        for role in (f"env-{ENV}", f"agent-{AGENT}", "model-policy"):
            path = tmp_path / f"{role}.log"
            wait_until(lambda path=path: "ready:" in path.read_text(errors="replace"), 60, role)  # type: ignore[misc]
        out = tmp_path / "rollouts.jsonl"
        collected = _run(["collect", "-i", str(package.rows), "-o", str(out)], env("runner"))
        assert collected.returncode == 0, collected.stderr
        _assert_rewarded(out)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
    refused = [line for line in servers.log(0).splitlines() if "Violation" in line]
    assert not refused  # every role had what it needed
