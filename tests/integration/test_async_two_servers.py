"""Two vLLM servers serve one policy under asynchronous training: every version reaches both
through the bus; one is killed and restarted mid-run, catches up, and serves again, while
the run goes on climbing on the other.

Two server processes of the same model (CPU build, `--enable-lora`), a `gym-runner
sync-adapters` beside each, the `vllm` model function over both; the trainer, the task and
the stand-ins are `test_async_trainer.py`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_vllm
from tests.integration.test_async_trainer import Bus, Steps, mean, start_bus, train
from tests.lora import LORA_ARGS, LORA_ENV
from tests.tiny_model import tiny_model_dir
from tests.vllm_server import VllmServer

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(900)

KILL_AT = 5
"""The step after which the second server is killed."""
MIN_STEPS, MAX_STEPS = 60, 400
SERVED_AGAIN = 16
"""Generations the restarted server must serve before the run may end."""


@pytest.fixture(scope="module")
def two_servers(
    lora_vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Bus, VllmServer]]:
    second = VllmServer(
        require_vllm(), tiny_model_dir(), extra_args=LORA_ARGS, extra_env=LORA_ENV, own_session=False
    )
    second.start()
    try:
        made = start_bus(tmp_path_factory.mktemp("two"), [lora_vllm_server, second])
        try:
            made.agents(1)
            yield made, second
        finally:
            made.stop()
    finally:
        second.stop()


def generations(server: VllmServer) -> int:
    """Chat completions the server has answered since it started (its access log)."""
    return server.log_path.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def test_two_servers_serve_every_version_and_a_restarted_one_catches_up(
    two_servers: tuple[Bus, VllmServer], tmp_path: Path
) -> None:
    made, second = two_servers
    events: dict[str, float] = {}
    restarted = threading.Event()

    def restart() -> None:
        events["killed"] = time.monotonic()
        second.kill()
        second.start()  # the same port: the model function's list is unchanged
        events["restarted"] = time.monotonic()
        restarted.set()

    def each(step: int) -> bool:
        if step == KILL_AT:
            events["kill step"] = step
            threading.Thread(target=restart, daemon=True).start()
        return step >= MIN_STEPS and restarted.is_set() and generations(second) >= SERVED_AGAIN

    run = train(made, tmp_path, steps=MAX_STEPS, callbacks=(Steps(each).callback,))
    outcomes = run.worker.relay.outcomes
    one, two = made.servers[0].root, second.root
    both = [outcome.version for outcome in outcomes if set(outcome.loaded) == {one, two}]
    alone = [outcome.version for outcome in outcomes if outcome.loaded == [one]]
    rewards = run.rewards
    print(
        f"{len(rewards)} steps in {run.seconds:.0f} s; killed after step {KILL_AT}, back "
        f"{events['restarted'] - events['killed']:.0f} s later; {len(outcomes)} versions, loaded by both "
        f"servers: {len(both)}, by the first alone while the second was down: {len(alone)} "
        f"({alone[0] if alone else '-'}-{alone[-1] if alone else '-'}) "
        f"({set(reason for outcome in outcomes for reason in outcome.missing.values())}); the restarted "
        f"server served {generations(second)} generations; reward by step {[round(value, 2) for value in rewards[:40]]}"
        f"{' ...' if len(rewards) > 40 else ''}; last 5 {mean(rewards[-5:]):.2f}"
    )
    assert restarted.is_set() and generations(second) >= SERVED_AGAIN
    assert len(both) + len(alone) == len(outcomes)  # the first server loaded every version
    assert (
        outcomes[0].version in both and outcomes[-1].version in both
    )  # before the kill, and after catching up
    assert alone == list(range(alone[0], alone[-1] + 1))  # one stretch: the second server's downtime
    assert run.total("rollout/failed_total") == 0  # calls the dead server dropped went to the other
    assert mean(rewards[-5:]) - mean(rewards[:5]) >= 0.3
