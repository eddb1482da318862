"""Shared fixtures: one real nats-server per test session, a connection per test, a fake
OpenAI-compatible HTTP server, a fake web (search endpoint and pages), hosted functions, and a
real vLLM server on a tiny model."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gymbus import bus
from gymbus.bus import Connection, environment_service, model_service
from gymbus.functions import MemoryState, ModelOptions
from gymbus.functions.registry import ENVIRONMENTS, MODELS
from tests.fake_openai import FakeOpenAI, ServerThread
from tests.fake_web import CX as FAKE_CX
from tests.fake_web import KEY as FAKE_KEY
from tests.fake_web import FakeWeb
from tests.lanes import markers_of
from tests.lora import LORA_ARGS, LORA_ENV
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import VllmServer, vllm_python

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TESTS = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In the fast lane, a file that is slow as a whole is not even imported (TRL alone
    takes seconds to import)."""
    if "not slow" not in (config.getoption("markexpr") or "") or not collection_path.is_file():
        return None
    path = collection_path.resolve()
    if path.is_relative_to(TESTS) and "slow" in markers_of(path.relative_to(TESTS).as_posix()):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what its file needs (`tests/lanes.py`)."""
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(TESTS):
            test = getattr(item, "originalname", item.name)
            for marker in markers_of(path.relative_to(TESTS).as_posix(), test):
                item.add_marker(marker)


WEATHER = "example_single_tool_call"
WEATHER_AGENT = "example_single_tool_call_simple_agent"


@pytest.fixture(scope="session")
def nats_server() -> Iterator[bus.EmbeddedServer]:
    """A real nats-server with JetStream on a free loopback port, for the whole session."""
    server = bus.EmbeddedServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: bus.EmbeddedServer) -> str:
    return nats_server.url


@pytest.fixture(scope="session")
def nemo_gym_python() -> Path:
    """NeMo Gym 0.7.0's own environment (its Python, with NeMo Gym's client code in it);
    skipped where it cannot be built, a failure in CI."""
    from gymbus.functions.nemo_gym import requirements_of, virtual_env
    from gymbus.schemas import GymError

    try:
        return virtual_env(requirements_of(None), "NeMo Gym's clients").python
    except GymError as exc:
        message = f"NeMo Gym unavailable (`sh scripts/install-nemo-gym.sh`): {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI this is a failure, not a skip)")
        pytest.skip(message)


@pytest.fixture
def own_server() -> Iterator[str]:
    """A nats-server of the test's own (its URL): its streams hold that test's messages only."""
    server = bus.EmbeddedServer()
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Connection]:
    client = await bus.connect(nats_url, name="test")
    yield client
    await client.close()


@pytest.fixture
async def host(nc: Connection) -> AsyncIterator[bus.ServiceHost]:
    worker_host = bus.ServiceHost(nc)
    yield worker_host
    await worker_host.stop()


@pytest.fixture
async def weather_functions(host: bus.ServiceHost, nc: Connection) -> bus.ServiceHost:
    """The weather environment and the offline policy, served on the test bus."""
    await host.add(environment_service(ENVIRONMENTS[WEATHER], MemoryState()))
    await host.add(model_service("offline", "policy", MODELS["offline"].make(ModelOptions())))
    return host


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    server = ServerThread(fake.app())
    fake.url = server.start() + "/v1"
    yield fake
    server.stop()


@pytest.fixture
def openai_server(fake_openai: FakeOpenAI) -> FakeOpenAI:
    """The fake OpenAI server, with its records and failure settings reset."""
    fake_openai.requests.clear()
    fake_openai.fail_next = 0
    fake_openai.delay = 0.0
    return fake_openai


@pytest.fixture
def weather_rows() -> list[bytes]:
    return (EXAMPLES / f"{WEATHER}.jsonl").read_bytes().splitlines()


@pytest.fixture
def no_nats_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)


@pytest.fixture(scope="session")
def fake_web_server() -> Iterator[FakeWeb]:
    fake = FakeWeb()
    server = ServerThread(fake.app())
    fake.url = server.start()
    yield fake
    server.stop()


@pytest.fixture
def fake_web(fake_web_server: FakeWeb, monkeypatch: pytest.MonkeyPatch) -> FakeWeb:
    """The local fake web, reset, with this process configured to search it."""
    fake_web_server.searches.clear()
    fake_web_server.fail_next = 0
    for name, value in fake_web_env(fake_web_server).items():
        monkeypatch.setenv(name, value)
    return fake_web_server


def fake_web_env(fake: FakeWeb) -> dict[str, str]:
    """Environment variables pointing the `google` search provider at `fake`, and letting
    `browse` read its pages although they are on loopback."""
    return {
        "SEARCH_PROVIDER": "google",
        "GOOGLE_API_KEY": FAKE_KEY,
        "GOOGLE_CX": FAKE_CX,
        "GOOGLE_SEARCH_URL": f"{fake.url}/customsearch/v1",
        "GYMBUS_GOOGLE_SEARCH": json.dumps({"allow_private_addresses": True}),
    }


def require_vllm() -> Path:
    """The vLLM environment's Python; skips the test where vLLM is not installed, except in
    CI (`CI` set), where a missing vLLM is a failure."""
    python = vllm_python()
    if python is None:
        message = "vLLM is not installed: run `sh scripts/install-vllm.sh`"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI a missing vLLM is a failure, not a skip)")
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def lora_vllm_server() -> Iterator[VllmServer]:
    """A real vLLM server on the tiny model that loads LoRA adapters at run time
    (`tests/lora.py`), for the whole session."""
    yield from lora_vllm_on(tiny_model_dir())


def lora_vllm_on(model_dir: Path) -> Iterator[VllmServer]:
    """For a fixture: a real vLLM server on `model_dir` loading LoRA adapters at run time,
    in the test's session (see `own_session`), stopped at the fixture's teardown."""
    server = VllmServer(
        require_vllm(), model_dir, extra_args=LORA_ARGS, extra_env=LORA_ENV, own_session=False
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VllmServer]:
    """A real vLLM server on the tiny random Qwen2 model, for the whole session.

    Skipped where vLLM is not installed (`sh scripts/install-vllm.sh`), except in CI (`CI`
    set), where a missing vLLM is a failure, not a skip.
    """
    python = vllm_python()
    if python is None:
        message = "vLLM is not installed: run `sh scripts/install-vllm.sh`"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (in CI a missing vLLM is a failure, not a skip)")
        pytest.skip(message)
    server = VllmServer(python, tiny_model_dir())
    server.start()
    yield server
    server.stop()
