"""The copying model taught the Hermes tool-call format, not the task: the warm start of
the tool-learning test.

The base is `tests/copying_model.py`'s: a 2-layer model that can copy from its context, as
pretrained models can, and knows nothing of tools or weather. It never writes a well-formed
`<tool_call>` on its own, so RL would have nothing to reinforce. This supervised
fine-tuning (all weights, on the CPU, under a minute) shows it transcripts of
`tests/weather_task.py`'s conversation, token for token as the `vllm` model function builds
them (the first call's prompt from the chat template; later turns continued from the token
ids, `functions/models/_tokens.py`), in which every choice is random: half the transcripts call `get_weather` for a random city and answer a
random value, whatever the tool said; the other half answer a random value at once. So the
warm-started model knows the format, calls the tool about half the time, and picks the
city and the value by chance: which city to call and that the answer is the tool's value
are left for RL to learn.

`warm_start_dir()` builds it once per machine into a cache directory named after a hash
of everything that shapes it (this recipe, the task, the copying model's), as
`tests/tiny_model.py` does.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgspec import json as msgspec_json

from tests import weather_task
from tests.copying_model import copying_model_dir
from tests.tiny_model import cached_model

__all__ = ["CHAT_TOOLS", "Transcript", "transcript_tokens", "warm_start_dir"]

SEED = 4321
TRANSCRIPTS = 2000
EPOCHS = 3
BATCH = 32
LEARNING_RATE = 3e-3
CHAT_TOOLS = [
    {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")}}
    for tool in weather_task.TOOLS
]
"""The task's tools as the chat template receives them (Chat Completions' form)."""


@dataclass(frozen=True)
class Transcript:
    """One conversation: its prompt, the city called (`None`: no call), the degrees the tool
    answered, and the number the answer names."""

    prompt: str
    called: str | None
    degrees: int
    answer: int


def _call_text(city: str) -> str:
    return f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>'


def _tool_turn(degrees: int) -> str:
    """What the chat template writes after an assistant turn's end for the tool's answer."""
    output = msgspec_json.encode(weather_task.Forecast(degrees=degrees)).decode()
    return (
        f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def transcript_tokens(tokenizer: Any, transcript: Transcript) -> tuple[list[int], list[int]]:
    """The token ids of `transcript` as the policy sees and writes them, and a mask that is
    1 on the tokens the model writes (each turn up to its end-of-turn token)."""
    messages = [{"role": "user", "content": transcript.prompt}]
    prompt = tokenizer.apply_chat_template(
        messages, tools=CHAT_TOOLS, add_generation_prompt=True, tokenize=False
    )
    pieces: list[tuple[str, int]] = [(prompt, 0)]
    if transcript.called is not None:
        pieces += [
            (_call_text(transcript.called) + "<|im_end|>", 1),
            (_tool_turn(transcript.degrees), 0),
        ]
    pieces.append((f"It is {transcript.answer}.<|im_end|>", 1))
    ids: list[int] = []
    mask: list[int] = []
    for text, trained in pieces:
        more = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += more
        mask += [trained] * len(more)
    return ids, mask


def _random_transcripts(seed: int, count: int) -> list[Transcript]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        prompt = rng.choice(weather_task.PROMPTS).format(city=rng.choice(weather_task.CITIES))
        called = rng.choice(weather_task.CITIES) if rng.random() < 0.5 else None
        made.append(
            Transcript(prompt, called, rng.choice(weather_task.DEGREES), rng.choice(weather_task.DEGREES))
        )
    return made


def _fine_tune(model: Any, examples: list[tuple[list[int], list[int]]], seed: int, pad: int) -> None:
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    order = random.Random(seed)
    model.train()
    for _ in range(EPOCHS):
        order.shuffle(examples)
        for start in range(0, len(examples), BATCH):
            batch = examples[start : start + BATCH]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
            labels = torch.tensor(
                [
                    [t if m else -100 for t, m in zip(i, k, strict=True)] + [-100] * (width - len(i))
                    for i, k in batch
                ]
            )
            attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
            loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()


def build_warm_start(directory: Path, seed: int = SEED) -> Path:
    """Fine-tune the copying model on the random transcripts; save it (and its tokenizer) in
    `directory`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = copying_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    examples = [transcript_tokens(tokenizer, t) for t in _random_transcripts(seed, TRANSCRIPTS)]
    _fine_tune(model, examples, seed, int(tokenizer.pad_token_id))
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def _recipe_key(seed: int) -> str:
    sources = b"".join(Path(module.__file__ or "").read_bytes() for module in (weather_task,))
    own = Path(__file__).read_bytes()
    return hashlib.sha256(own + sources + copying_model_dir().name.encode() + str(seed).encode()).hexdigest()[
        :16
    ]


def warm_start_dir(seed: int = SEED, cache: Path | None = None) -> Path:
    """The warm-started model's directory, built on first use (see `cached_model`)."""
    return cached_model(
        f"gymbus-tool-warm-start-{_recipe_key(seed)}", lambda at: build_warm_start(at, seed), cache
    )
