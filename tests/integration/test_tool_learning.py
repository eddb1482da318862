"""Multi-step tool use through the bus, on `tests/weather_task.py`'s task (call
`get_weather` for the prompt's city, answer with the degrees it returned): what a trainer
takes from a two-call rollout, and what the policy learns from it.

The policy is a 2-layer model that can copy from its context (`tests/copying_model.py`)
warm-started on random transcripts (`tests/tool_warm_start.py`): it writes well-formed
Hermes tool calls and answers, calls the tool about half the time, and picks the city and
the number by chance. The processes are the single-turn learning test's
(`test_async_trainer.py`, whose bus and trainer this reuses): a nats-server, a `gym-runner
serve` worker with the environment, its simple agent and the `vllm` model function, a
`gym-runner sync-adapters` beside the vLLM server (CPU build, `--enable-lora`).
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus
from gymbus.bus import ServeOptions
from gymbus.functions import ModelOptions
from gymbus.runner import BusRolloutWorker
from gymbus.schemas import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, Rollout, output_text
from tests.conftest import lora_vllm_on
from tests.integration.test_async_trainer import ACK_WAIT, Bus, Run, mean, train
from tests.integration.test_trainer import Fleet
from tests.line_plot import write_line_plot
from tests.tool_warm_start import Transcript, transcript_tokens, warm_start_dir
from tests.vllm_server import MODEL_NAME, VllmServer
from tests.weather_task import AGENT, NAME, answer_number, task_rows

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("trl")

pytestmark = pytest.mark.timeout(2400)

TASK_FILE = Path(__file__).resolve().parents[1] / "weather_task.py"
_CALLED = re.compile(r'"arguments": \{"city": "(.*?)"\}')
_TOOL_OUTPUT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
_CITY = re.compile(r"city (\w)")


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


class RecordingWorker(BusRolloutWorker):
    """GymBus's rollout worker, keeping every sample the trainer takes, in the order taken
    (the trainer takes exactly a batch of them a step: `token_budget` 0)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taken: list[Any] = []
        get = self.rollout_buffer.get

        def take(*args: Any, **kwargs: Any) -> Any:
            sample = get(*args, **kwargs)
            self.taken.append(sample)
            return sample

        self.rollout_buffer.get = take  # type: ignore[method-assign]


@dataclass(frozen=True)
class Episode:
    """What one trained sample did, read from its tokens."""

    reward: float
    right_city: bool
    """Its first tool call named the prompt's city."""
    used_output: bool
    """Its answer named the degrees its first call returned (whichever city it asked for)."""
    trained_turns: int
    """Model turns with a trained token (runs of the loss mask)."""
    answer: int | None
    """The one number its answer names (`None`: none, or several)."""
    mask_as_rendered: bool | None
    """Whether its tokens and loss mask are the warm start's own rendering of the same
    conversation (`transcript_tokens`: the tool's output and the second prompt's framing
    untrained), made apart from the rollout worker; `None` for one not in its words."""

    @classmethod
    def of(cls, sample: Any, tokenizer: Any) -> Episode:
        ids, mask = sample.input_ids.tolist(), sample.completion_mask.tolist()
        first = mask.index(1)
        text = tokenizer.decode(ids[first:])
        called = _CALLED.findall(text)
        outputs = [_degrees(output) for output in _TOOL_OUTPUT.findall(text)]
        city = _CITY.search(sample.prompt[-1]["content"])
        answer = answer_number(sample.completion[0]["content"])
        return cls(
            reward=float(sample.metrics["reward"]),
            right_city=bool(called and city and called[0] == city.group(1)),
            used_output=bool(outputs and answer is not None and answer == outputs[0]),
            trained_turns=sum(1 for p in range(len(mask)) if mask[p] and (p == 0 or not mask[p - 1])),
            answer=answer,
            mask_as_rendered=_as_rendered(
                tokenizer, ids, mask, _transcript(sample.prompt[-1]["content"], called, outputs, answer)
            ),
        )


def _transcript(
    prompt: str, called: list[str], outputs: list[int | None], answer: int | None
) -> Transcript | None:
    """The conversation as the warm start writes one: at most one call, its output read, an
    answer naming one number; `None` for any other."""
    if answer is None or len(called) > 1 or len(outputs) != len(called) or None in outputs:
        return None
    return Transcript(prompt, called[0] if called else None, outputs[0] or 0 if outputs else 0, answer)


def _as_rendered(
    tokenizer: Any, ids: list[int], mask: list[int], transcript: Transcript | None
) -> bool | None:
    """Whether `mask` is the warm start's own for `transcript`; `None` where there is none, or
    its words differ from `ids`."""
    if transcript is None:
        return None
    words, trained = transcript_tokens(tokenizer, transcript)
    return trained == mask if words == ids else None


def _degrees(output: str) -> int | None:
    try:
        value = json.loads(output)
    except ValueError:
        return None
    return value.get("degrees") if isinstance(value, dict) else None


@dataclass(frozen=True)
class Figures:
    """A run's figures by step, from the samples each step trained on."""

    steps: list[list[Episode]]
    seconds: float

    @classmethod
    def of(cls, run: Run, tokenizer: Any, batch: int) -> Figures:
        worker = run.worker
        assert isinstance(worker, RecordingWorker)
        # The worker may have handed out samples for a step the trainer never took.
        trained = worker.taken[: len(run.rows) * batch]
        episodes = [Episode.of(sample, tokenizer) for sample in trained]
        return cls([episodes[at : at + batch] for at in range(0, len(episodes), batch)], run.seconds)

    def series(self, value: Any) -> list[float]:
        return [mean([float(value(episode)) for episode in step]) for step in self.steps]

    @property
    def rewards(self) -> list[float]:
        return self.series(lambda episode: episode.reward)

    def climb(self, value: Any) -> float:
        series = self.series(value)
        return mean(series[-5:]) - mean(series[:5])

    def report(self, name: str) -> str:
        def rounded(value: Any) -> list[float]:
            return [round(x, 2) for x in self.series(value)]

        return (
            f"{name}: {len(self.steps)} steps in {self.seconds:.0f} s\n  reward {rounded(lambda e: e.reward)}\n"
            f"  right city {rounded(lambda e: e.right_city)}\n  used output {rounded(lambda e: e.used_output)}\n"
            f"  trained turns {rounded(lambda e: e.trained_turns)}\n"
            f"  commonest answer's share {[round(share, 2) for share in self.commonest_answer_share()]}"
        )

    def outline(self) -> str:
        """The run in one line, 25-step means: what a failed assert's summary line shows."""

        def means(series: list[float]) -> list[float]:
            return [round(mean(series[at : at + 25]), 2) for at in range(0, len(series), 25)]

        return (
            f"25-step means: reward {means(self.rewards)}, right city "
            f"{means(self.series(lambda e: e.right_city))}, used output "
            f"{means(self.series(lambda e: e.used_output))}, commonest answer's share "
            f"{means(self.commonest_answer_share())}"
        )

    def commonest_answer_share(self) -> list[float]:
        """Per step, the share of the answers naming a number that name its commonest: 0.25
        where the four values are answered alike, 1 where the policy always answers one (a
        policy that copies the tool's value answers them alike too)."""
        shares = []
        for step in self.steps:
            answers = collections.Counter(e.answer for e in step if e.answer is not None)
            shares.append(max(answers.values()) / answers.total() if answers else 0.0)
        return shares


STEPS = 250
BATCH = 128
"""Sixteen groups of eight a step. With eight, the answer's copy of the degrees was learned in
6 of 7 runs measured, its 10-step mean passing 0.5 between steps 104 and 158; in CI's run it
stayed at chance for all 250 steps. With sixteen, it passed 0.5 at steps 85 to 116 in 6 of 6
runs, and the city 0.8 at steps 50 to 64 (65 to 77 with eight). With four, the city was
learned in all 6 runs measured but the copy in 2. In probes of GRPO on the answer's token
alone, few groups a step at a high rate pushed the answer onto one value instead of the copy."""
LEARNING_RATE = 2e-3
"""The single-turn test's 1e-2 (and 5e-3) broke this policy's tool-call format within 20 to 80
steps: its calls stopped and its answers garbled, in some runs and not others. 3e-3 broke it
late in some runs too."""
SCHEDULE: dict[str, Any] = {
    "lr_scheduler_type": "warmup_stable_decay",
    "lr_scheduler_kwargs": {"num_decay_steps": 100},
}
"""The learning rate held for 150 steps, then brought down to 0 over the last 100. In the runs
measured, the city was learned while it was held and the answer's copy after the city, mostly
in the steps around the rate's turn. Held for all its steps, 3e-3 broke the tool-call format
late in some runs, and the last 5 steps measured the break, not what was learned: in one, at
step 145, rollouts with one model turn rose from 6% to half and the reward fell from 0.58 to
about 0.3, below half its rate of calls naming the right city (0.88), so the calls the policy
wrote no longer parsed as calls."""


def test_an_agent_learns_to_call_the_tool_and_answer_with_its_output_and_stays_put_without_its_adapters(
    tool_bus: Bus, tmp_path: Path
) -> None:
    """TRL's asynchronous trainer, GymBus's rollout worker and the adapters delivered to the
    vLLM server: the policy learns to call the tool, to call it for the prompt's city, and to
    answer with the degrees it returned. The same run without adapter delivery stays flat."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(warm_start_dir())
    rows = task_rows(tmp_path / "rows.jsonl")
    common: dict[str, Any] = {
        "rows": rows, "model_dir": warm_start_dir(), "worker_type": RecordingWorker, "steps": STEPS,
        "max_completion_length": 48, "learning_rate": LEARNING_RATE, "per_device_train_batch_size": BATCH,
        **SCHEDULE,
    }  # fmt: skip
    synced = Figures.of(train(tool_bus, tmp_path / "synced", **common), tokenizer, BATCH)
    unsynced = Figures.of(train(tool_bus, tmp_path / "unsynced", deliver=False, **common), tokenizer, BATCH)
    for name, figures in (("synced", synced), ("unsynced", unsynced)):
        print(figures.report(name))

    def reward(episode: Episode) -> float:
        return episode.reward

    def right_city(episode: Episode) -> bool:
        return episode.right_city

    def used_output(episode: Episode) -> bool:
        return episode.used_output

    def trained_turns(episode: Episode) -> int:
        return episode.trained_turns

    lines = {"reward": synced.series(reward), "right city": synced.series(right_city),
             "used output": synced.series(used_output), "reward, no delivery": unsynced.series(reward)}  # fmt: skip
    print(
        f"plot: {write_line_plot(tmp_path / 'reward_by_step.svg', f'by step, {BATCH} rollouts each', lines)}"
    )
    assert len(synced.steps) == len(unsynced.steps) == STEPS

    # A 5-step mean is of 640 rollouts: its standard error is at most 0.02 for the reward
    # (values 0, 0.5 and 1) and for a rate, so a climb's is at most 0.03. Measured
    # (8d50f61, beside a census run): reward 0.11 -> 0.99, right city 0.11 -> 1.00, answers using
    # the tool's output 0.11 -> 0.98, trained turns 1.47 -> 1.99; without delivery the reward
    # moved 0.00. The copy's rate passed 0.5 at step 104 (85 to 116 in 6 runs), so the last 5
    # steps measure what was learned, with over a hundred steps to spare.
    # The warm start calls half the time and each half of the reward is a quarter's chance:
    # about 0.12 expected.
    assert mean(synced.rewards[:5]) <= 0.3, synced.outline()
    assert synced.climb(reward) >= 0.3, synced.outline()
    assert synced.climb(right_city) >= 0.25, synced.outline()
    assert synced.climb(used_output) >= 0.25, synced.outline()
    assert synced.climb(trained_turns) >= 0.2, synced.outline()
    assert abs(unsynced.climb(reward)) <= 0.15, unsynced.outline()
    # Every trained sample in the warm start's words has its mask: the tool's output untrained.
    checked = [e.mask_as_rendered for f in (synced, unsynced) for step in f.steps for e in step]
    print(f"masks as rendered: {checked.count(True)}, otherwise: {checked.count(False)}, "
          f"not in the warm start's words: {checked.count(None)}")  # fmt: skip
    assert checked.count(True) >= len(checked) // 2
    assert checked.count(False) == 0
