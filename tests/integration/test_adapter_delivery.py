"""A trainer's LoRA adapters reach a real vLLM server through the bus: TRL's own adapter-sync
client (`VLLMClient`, what `AsyncGRPOTrainer` calls) talks to the rollout worker's relay,
each version travels through the object store to a `gym-runner sync-adapters` process
beside the server, which writes it to its own directory and loads it; model calls through
a `gym-runner serve vllm` worker then name it, and generate from it.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus
from gymbus.bus import PolicyPublisher, ServeOptions
from gymbus.functions import ModelOptions
from gymbus.runner.training._loop import LoopThread
from gymbus.runner.training._relay import AdapterRelay
from gymbus.schemas import POLICY_KEY, Response, ResponsesCreateParams, adapter_name, policy_key
from tests.integration.test_policy_versions import logprobs_under, with_adapter
from tests.integration.test_trainer import Fleet
from tests.lora import SAME_WEIGHTS, Syncer, make_adapter
from tests.vllm_server import MODEL_NAME, VllmServer
from tests.vllm_stub import serve_stub

pytest.importorskip("torch")
pytest.importorskip("peft")
trl = pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(600)

POLICY = policy_key("policy", "delivery")
INCARNATION = "d1e2f3a4"


class Setup:
    """A bus, a syncer beside the server (and beside each of `others`), a vLLM model worker
    over all of them, and the relay in this process, for the policy called `name`.

    A syncer owns its server's adapters of its policy's name (it unloads those its bus does
    not know), so two setups alive at once on one server take different names."""

    def __init__(
        self, server: VllmServer, directory: Path, others: tuple[str, ...] = (), name: str = "policy"
    ) -> None:
        self.server = server
        self.name = name
        self.policy = policy_key(name, "delivery")
        self.nats = bus.EmbeddedServer()
        self.url = self.nats.start()
        urls = [server.url, *others]
        self.syncers = [
            Syncer(
                self.url,
                url,
                directory / f"syncer-adapters-{number}",
                directory / f"syncer-{number}.log",
                name,
            )
            for number, url in enumerate(urls)
        ]
        self.syncer = self.syncers[0]
        self.fleet = Fleet(self.url, directory / "workers.log")
        policy = ModelOptions(base_url=",".join(urls), model=MODEL_NAME, api="vllm")
        try:
            self.fleet.start(ServeOptions(functions=("vllm",), model=policy, served_model=name), [name])
        except BaseException:  # the processes started so far must not outlive the test
            self._stop_processes()
            raise
        self.loop = LoopThread("test-relay")
        self.conn = self.loop.run(bus.connect(self.url, name="test trainer"))
        self.publisher = self.loop.run(
            PolicyPublisher.open(bus.Bus.over(self.conn), self.policy, INCARNATION)
        )
        self.relay = AdapterRelay(self.publisher)
        self.relay_url = self.loop.run(self.relay.start())

    def close(self) -> None:
        self.loop.run(self.relay.stop())
        self.loop.run(self.publisher.close(forget=True))
        self.loop.run(self.conn.close())
        self.loop.stop()
        self._stop_processes()

    def _stop_processes(self) -> None:
        self.fleet.stop()
        for syncer in self.syncers:
            syncer.stop()
        self.nats.stop()

    def call(self, rollout: str = "r") -> Response:
        """One generation by the policy, through the bus, as a call of rollout `rollout` (whose
        key picks the server it goes to first)."""

        async def once() -> Response:
            params = ResponsesCreateParams(
                input="what is the weather in paris",
                max_output_tokens=8,
                metadata={POLICY_KEY: self.policy},
                prompt_cache_key=rollout,
            )
            nc = await bus.connect(self.url, name="test")
            try:
                subject = f"gym.model.{self.name}.responses"
                reply = await bus.request(nc, subject, msgspec.json.encode(params), timeout=60)
            finally:
                await nc.close()
            return msgspec.json.decode(reply, type=Response)

        return asyncio.run(once())


@pytest.fixture(scope="module", autouse=True)
def accelerate_state() -> None:
    """TRL's client logs through accelerate, which wants its state made first."""
    from accelerate import PartialState

    PartialState(cpu=True)


@pytest.fixture(scope="module")
def setup(lora_vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    made = Setup(lora_vllm_server, tmp_path_factory.mktemp("delivery"))
    try:
        yield made
    finally:
        made.close()


def held(server: VllmServer) -> dict[str, str]:
    """The adapters the server holds, each with the directory it loaded it from."""
    with urllib.request.urlopen(f"{server.url}/models", timeout=10) as reply:
        cards = json.load(reply)["data"]
    return {card["id"]: card["root"] for card in cards if card.get("parent")}


def wait_for(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_trls_adapter_sync_through_the_relay_reaches_the_server_and_the_model_calls(
    setup: Setup, tmp_path: Path
) -> None:
    from peft import PeftModel
    from trl.experimental.async_grpo import AsyncGRPOConfig
    from trl.experimental.async_grpo.async_grpo_trainer import select_adapter_sync
    from trl.experimental.async_grpo.vllm_client import VLLMClient

    trainer_side = tmp_path / "trainer" / ".vllm_lora"  # what the trainer writes; the server never reads it
    v1 = make_adapter(trainer_side / "trl-policy-v1", seed=11)
    v2 = make_adapter(trainer_side / "trl-policy-v2", seed=12)
    client = VLLMClient(setup.relay_url, server_timeout=30)
    client.wait_for_server_ready()
    # TRL decides on adapter-only sync from what the relay says of the servers.
    peft_model = PeftModel.from_pretrained(_base(), v1)
    config = AsyncGRPOConfig(output_dir=str(tmp_path), max_staleness=2, use_cpu=True, bf16=False)
    assert select_adapter_sync(client.get_server_info(), peft_model, config) is True

    started = time.monotonic()
    client.pause()
    client.load_lora_adapter("trl-policy-v1", str(v1))
    client.resume()
    took = time.monotonic() - started
    loaded = held(setup.server)
    print(f"version 1 loaded in {took:.3f} s; the server holds {loaded}")
    name1 = adapter_name(POLICY, INCARNATION, 1)
    assert name1 in loaded and loaded[name1].startswith(str(setup.syncer.directory))
    first = setup.call().output[-1]
    assert first.policy_version == 1
    assert isinstance(first.prompt_token_ids, list) and isinstance(first.generation_token_ids, list)
    expected = logprobs_under(with_adapter(v1), first.prompt_token_ids, first.generation_token_ids)
    assert isinstance(first.generation_log_probs, list)
    assert max(abs(a - b) for a, b in zip(first.generation_log_probs, expected, strict=True)) < SAME_WEIGHTS

    client.load_lora_adapter("trl-policy-v2", str(v2))
    client.unload_lora_adapter("trl-policy-v1")
    assert setup.call().output[-1].policy_version == 2
    wait_for(lambda: set(held(setup.server)) == {adapter_name(POLICY, INCARNATION, 2)})


def _base() -> Any:
    from transformers import AutoModelForCausalLM

    from tests.tiny_model import tiny_model_dir

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir())


def test_an_adapter_no_server_can_load_stops_the_sync_naming_the_server(setup: Setup, tmp_path: Path) -> None:
    from trl.experimental.async_grpo.vllm_client import VLLMClient

    too_big = make_adapter(tmp_path / "trl-policy-v7", seed=7, rank=16)  # the server's --max-lora-rank is 8
    client = VLLMClient(setup.relay_url, server_timeout=30)
    before = setup.publisher.record.current
    with pytest.raises(Exception, match="Request failed: 500") as refused:
        client.load_lora_adapter("trl-policy-v7", str(too_big))
    message = str(refused.value)
    print(message)
    assert (
        f"no inference server of policy policy loaded adapter {adapter_name(POLICY, INCARNATION, 7)}"
        in message
    )
    assert setup.server.root in message
    assert setup.publisher.record.current == before  # model calls keep naming the version before
    assert setup.call().output[-1].policy_version == before  # and the server still serves them


def test_a_server_that_cannot_load_a_version_is_named_and_skipped_never_serving_the_old_one(
    lora_vllm_server: VllmServer, tmp_path: Path
) -> None:
    """One of two servers refuses every adapter (a stub injecting the fault): each version is
    current on the other, the refusing server is named with its reason, and model calls the
    model function first sends there come back from the other server, never from an older
    version or the base model."""
    from trl.experimental.async_grpo.vllm_client import VLLMClient

    stub_server = serve_stub()
    stub, stub_url = next(stub_server)
    stub.load_status, stub.check_models = 500, True
    made = Setup(lora_vllm_server, tmp_path, others=(stub_url,), name="refused")  # beside the module's setup
    try:
        client = VLLMClient(made.relay_url, server_timeout=30)
        client.load_lora_adapter("trl-policy-v1", str(make_adapter(tmp_path / "trl-policy-v1", seed=21)))
        outcome = made.relay.outcomes[-1]
        versions = [made.call(f"rollout-{number}").output[-1].policy_version for number in range(12)]
    finally:
        made.close()
        stub_server.close()
    stub_root = stub_url.removesuffix("/v1")
    refused = [body["model"] for path, body in stub.requests if path == "chat"]
    print(f"loaded on {outcome.loaded}, not on {outcome.missing}; the refusing server was asked {len(refused)} "
          f"time(s) and sent each on; versions of the calls: {versions}")  # fmt: skip
    assert outcome.loaded == [lora_vllm_server.root] and "injected" in outcome.missing[stub_root]
    assert versions == [1] * 12
    assert refused and set(refused) == {
        adapter_name(made.policy, INCARNATION, 1)
    }  # it was asked, and said 404


def test_on_a_locked_bus_each_role_may_do_its_part_of_the_delivery(
    lora_vllm_server: VllmServer, tmp_path: Path
) -> None:
    """`gym-runner secure init`'s roles on a real nats-server enforcing them: the trainer
    (runner) publishes a version, `sync-adapters` (adapters) fetches and loads it and
    reports, the model worker (model-policy) follows the record; none is refused."""
    import os
    import subprocess
    import sys

    from bench._cluster import NatsServers
    from gymbus.runner.security._secure import secure_init

    layout = secure_init(tmp_path / "secrets", ["instruction_following"], [], ["policy"])
    authorization = "authorization" + layout.config.read_text().split("authorization", 1)[1]
    policy = policy_key("policy", "locked")

    def env(role: str, url: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POLICY_"))}
        return {**clean, "NATS_URL": url, "NATS_NKEY": str(layout.credentials[role])}

    with NatsServers(tmp_path, size=1, extra=authorization) as servers:
        url = servers.url(0)
        log = tmp_path / "processes.log"
        with open(log, "wb") as out:
            processes = [
                subprocess.Popen([sys.executable, "-P", "-m", "gymbus.runner", *command], env=env(role, url),
                                 stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
                for role, command in (
                    ("adapters", ["sync-adapters", "--vllm-url", lora_vllm_server.url, "--adapter-dir", str(tmp_path / "a")]),
                    ("model-policy", ["serve", "vllm", "--model-url", lora_vllm_server.url, "--model", MODEL_NAME,
                                      "--model-api", "vllm"]),
                )
            ]  # fmt: skip
        try:
            wait_for(lambda: log.read_bytes().count(b"ready:") == 2, timeout=60)
            loaded, version = asyncio.run(_publish_and_call(url, layout, policy, tmp_path))
        finally:
            for process in processes:
                process.terminate()
                process.wait(15)
    text = log.read_text(errors="replace")
    print(f"loaded on {loaded}; the call named version {version}")
    assert loaded == [lora_vllm_server.root] and version == 1
    assert "Permissions Violation" not in text and "not authorized" not in text.lower(), text[-3000:]


async def _publish_and_call(url: str, layout: Any, policy: str, directory: Path) -> tuple[list[str], Any]:
    from gymbus.bus import BusAuth

    trainer = await bus.connect(
        url, name="trainer", auth=BusAuth(nkey=layout.credentials["runner"]), role="runner"
    )
    caller = await bus.connect(
        url, name="environment", auth=BusAuth(nkey=layout.credentials["env-instruction_following"]),
        role="env-instruction_following",
    )  # fmt: skip
    try:
        publisher = await PolicyPublisher.open(bus.Bus.over(trainer), policy, "l0ck3d")
        wait = time.monotonic() + 30
        while not publisher.servers() and time.monotonic() < wait:
            await asyncio.sleep(0.2)
        adapter = make_adapter(directory / "v1", seed=31)
        files = {
            name: (adapter / name).read_bytes()
            for name in ("adapter_config.json", "adapter_model.safetensors")
        }
        published = await publish_once(publisher, files)
        params = ResponsesCreateParams(input="hello", max_output_tokens=4, metadata={POLICY_KEY: policy})
        for _ in range(50):  # the model worker hears of the version within milliseconds
            reply = await bus.request(
                caller, "gym.model.policy.responses", msgspec.json.encode(params), timeout=60
            )
            version = msgspec.json.decode(reply, type=Response).output[-1].policy_version
            if version == 1:
                break
            await asyncio.sleep(0.1)
        await publisher.close(forget=True)
        return published.loaded, version
    finally:
        await trainer.close()
        await caller.close()


async def publish_once(publisher: PolicyPublisher, files: dict[str, bytes]) -> Any:
    return await publisher.publish(1, files, rank=8)
