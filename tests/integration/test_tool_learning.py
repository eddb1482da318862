"""Multi-step tool use through the bus, on `tests/weather_task.py`'s task (call
`get_weather` for the prompt's city, answer with the degrees it returned): what a trainer
learns from a two-call rollout.

The policy is the tiny model warm-started on random transcripts (`tests/tool_warm_start.py`):
it writes well-formed Hermes tool calls and answers, calls the tool about half the time,
and picks the city and the number by chance. The processes are the single-turn learning
test's (`test_async_trainer.py`, whose bus this reuses): a nats-server, a `gym-runner serve`
worker with the environment, its simple agent and the `vllm` model function, a `gym-runner
sync-adapters` beside the vLLM server (CPU build, `--enable-lora`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus
from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, Rollout, output_text
from tests.conftest import lora_vllm_on
from tests.integration.test_async_trainer import ACK_WAIT, Bus
from tests.integration.test_trainer import Fleet
from tests.tool_warm_start import Transcript, transcript_tokens, warm_start_dir
from tests.vllm_server import MODEL_NAME, VllmServer
from tests.weather_task import AGENT, NAME, answer_number, task_rows

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(900)

TASK_FILE = Path(__file__).resolve().parents[1] / "weather_task.py"


@pytest.fixture(scope="module")
def warm_server() -> Iterator[VllmServer]:
    """vLLM on the warm-started model, loading LoRA adapters at run time."""
    yield from lora_vllm_on(warm_start_dir())


@pytest.fixture(scope="module")
def tool_bus(warm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bus]:
    """The bus; one worker serving the task (environment and agent) and the policy; a syncer."""
    directory = tmp_path_factory.mktemp("tools")
    nats = bus.EmbeddedServer()
    url = nats.start()
    made = Bus(nats, url, Fleet(url, directory / "workers.log"), directory, [warm_server])
    options = ServeOptions(
        functions=(str(TASK_FILE), "vllm"),
        model=ModelOptions(base_url=warm_server.url, model=MODEL_NAME, api="vllm"),
        limits=replace(DEFAULT_LIMITS, agent_concurrency=32),
        timeouts=replace(DEFAULT_TIMEOUTS, ack_wait=ACK_WAIT),
    )
    try:
        made.fleet.start(options, [NAME, AGENT, "policy"])
        made.sync(warm_server)
        yield made
    finally:
        made.stop()


async def one_rollout(url: str, row: bytes) -> Rollout:
    nc = await bus.connect(url, name="test")
    try:
        reply = await bus.request(nc, bus.subjects.agent_run(AGENT), row, timeout=120)
    finally:
        await nc.close()
    return msgspec.json.decode(reply, type=Rollout)


def generation_spans(rollout: Rollout) -> list[tuple[int, int]]:
    """Where each model call's generated tokens sit in the rollout's whole sequence (the last
    call's prompt + generation), from the calls' own token ids."""
    assert rollout.response is not msgspec.UNSET
    calls = [item for item in rollout.response.output if isinstance(item.generation_token_ids, list)]
    return [(len(c.prompt_token_ids), len(c.prompt_token_ids) + len(c.generation_token_ids)) for c in calls]  # type: ignore[arg-type]


def two_call_rollouts(url: str, rows: Path, wanted: int = 3, most: int = 32) -> list[bytes]:
    """Rollouts (one at a time) until `wanted` of them called the tool and then answered."""
    import asyncio

    lines = rows.read_text().splitlines()
    found: list[bytes] = []
    for attempt in range(most):
        row = json.loads(lines[attempt % len(lines)])
        row["responses_create_params"]["max_output_tokens"] = 48
        raw = msgspec.json.encode(asyncio.run(one_rollout(url, json.dumps(row).encode())))
        if len(generation_spans(msgspec.json.decode(raw, type=Rollout))) == 2:
            found.append(raw)
        if len(found) == wanted:
            break
    return found


def test_the_loss_covers_exactly_the_models_own_tokens_of_both_turns(tool_bus: Bus, tmp_path: Path) -> None:
    """A real two-call rollout becomes the trainer's sample as the rollout worker makes it,
    and TRL's packing picks its loss terms: they are exactly the two generations' tokens; the
    tool's output and the framing of the second prompt carry none."""
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo.packing import TreeRow

    from gymbus.runner.training._groups import read_member, score_group

    tokenizer = AutoTokenizer.from_pretrained(warm_start_dir())
    rollouts = two_call_rollouts(tool_bus.url, task_rows(tmp_path / "rows.jsonl"))
    assert len(rollouts) == 3
    canonical = 0
    for raw in rollouts:
        rollout = msgspec.json.decode(raw, type=Rollout)
        assert rollout.response is not msgspec.UNSET
        items = rollout.response.output
        spans = generation_spans(rollout)
        sample = score_group([read_member(raw, AGENT, False)], 0, [], 0, 0).samples[0]
        ids, mask = sample.input_ids.tolist(), sample.completion_mask.tolist()
        last = next(item for item in reversed(items) if isinstance(item.generation_token_ids, list))
        assert ids == last.prompt_token_ids + last.generation_token_ids  # type: ignore[operator]
        expected = [int(any(start <= p < end for start, end in spans)) for p in range(len(ids))]
        assert mask == expected
        calls = [item for item in items if isinstance(item.generation_token_ids, list)]
        for call, (start, end) in zip(calls, spans, strict=True):
            assert ids[start:end] == call.generation_token_ids
            assert sample.old_log_probs.tolist()[start:end] == pytest.approx(call.generation_log_probs)
        # The tool's output sits between the two generations, all of it masked.
        between = tokenizer.decode(ids[spans[0][1] : spans[1][0]])
        output = next(item.output for item in items if item.kind == "function_call_output")
        assert f"<tool_response>\n{output}\n</tool_response>" in between
        assert between.endswith("<|im_start|>assistant\n")
        # TRL's loss terms: one per trained token, each scored from the position before it.
        row = TreeRow()
        row.add({"input_ids": sample.input_ids, "completion_mask": sample.completion_mask,
                 "old_log_probs": sample.old_log_probs, "advantage": 1.0, "group_id": 0})  # fmt: skip
        packed = row.pack()
        assert [int(index) + 1 for index in packed["token_index"]] == [
            p for p in range(len(ids)) if expected[p]
        ]
        canonical += matches_warm_start(tokenizer, rollout, ids, mask)
        print(f"spans {spans} of {len(ids)} tokens; between the calls {between!r}")
    assert canonical >= 1  # the warm start was taught on these very tokens


def matches_warm_start(tokenizer: Any, rollout: Rollout, ids: list[int], mask: list[int]) -> bool:
    """Whether a rollout written in the warm start's exact words has its tokens and mask
    (the prompt the server rendered included); False for one written otherwise."""
    assert rollout.response is not msgspec.UNSET
    items = rollout.response.output
    prompt = str(rollout.responses_create_params.input[0].content)  # type: ignore[index, union-attr]
    call = next(item for item in items if item.kind == "function_call")
    called = json.loads(str(call.arguments)).get("city")
    output = json.loads(str(next(item.output for item in items if item.kind == "function_call_output")))
    answer = answer_number(output_text(rollout.response))
    if answer is None or not isinstance(called, str):
        return False
    transcript = Transcript(prompt, called, int(output["degrees"]), answer)
    words, trained = transcript_tokens(tokenizer, transcript)
    if tokenizer.decode(words) != tokenizer.decode(ids):
        print(f"not in the warm start's words: {tokenizer.decode(ids)!r}")
        return False
    assert (words, trained) == (ids, mask)
    return True
