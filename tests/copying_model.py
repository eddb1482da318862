"""A tiny model that can copy from its context: the base of the tool-learning test's policy.

A random 2-layer model does not learn, in the minutes a test has, to carry a token from one
place of its context to another. Taught the weather task's right answers directly (full
fine-tuning, 16 transcripts a step), the tests' tiny model still picked the city and the
degrees by chance after 200 steps, and a fresh 2-layer model (default initialisation)
after 675; with the tool list left out of the prompt, the fresh one learned the city at
about 300 steps and not the degrees in 750. Pretrained language models can copy; this one is made to copy
the way they first learn to, with induction heads: it is trained on runs of random tokens
followed by the same run again (the loss on the repeat), text that is neither the task nor
its tool format. Taught the same right answers, it copies the city after about 60 steps
(the degrees stood at 0.30 after 80; a prototype of this recipe, with another seed and
2,000 steps, copied both by 60), and its warm start, taught them through a LoRA of rank 8,
copies the city after 40 steps and the degrees after 80.

The model is a 2-layer `Qwen2ForCausalLM` (hidden 128, four heads of 32, the default
initialisation) with the tiny model's tokenizer. Its chat template is the tiny model's
without the tool list: the warm start teaches the model its one tool, and with the 150
tokens the rendered list adds, the same probe stood at 0.58 for the city and 0.31 for the
degrees after 100 steps.

`copying_model_dir()` builds it once per machine (about two minutes on one core) into a
cache directory named after a hash of this recipe and the tiny model's.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from tests.tiny_model import CHAT_TEMPLATE, cached_model, qwen2_config, tiny_model_dir

__all__ = ["copying_model_dir"]

SEED = 2024
STEPS = 1600
BATCH = 32
LEARNING_RATE = 3e-3
RUN = (8, 30)
"""The shortest and longest run of random tokens, repeated once."""
LEARNED = 0.5
"""The most mean loss on the repeats that counts as copying (uniform guessing is about 6)."""
_TOOLS_BLOCK_END = "{%- for message in messages %}"
CHAT_TEMPLATE_WITHOUT_TOOLS = (
    "{%- if messages[0].role == 'system' %}\n"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n" + _TOOLS_BLOCK_END + CHAT_TEMPLATE.split(_TOOLS_BLOCK_END, 1)[1]
)


def _repeated_runs(
    rng: random.Random, vocabulary: list[int], count: int
) -> list[tuple[list[int], list[int]]]:
    """(ids, labels): a run of random tokens and the run again, labelled on the repeat only
    (its first token is unpredictable, so unlabelled too)."""
    made = []
    for _ in range(count):
        run = [rng.choice(vocabulary) for _ in range(rng.randint(*RUN))]
        made.append((run + run, [-100] * (len(run) + 1) + run[1:]))
    return made


def _copy_loss(model: Any, batch: list[tuple[list[int], list[int]]]) -> Any:
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([ids + [0] * (width - len(ids)) for ids, _ in batch])
    labels = torch.tensor([labels + [-100] * (width - len(labels)) for _, labels in batch])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
    return model(input_ids=ids, attention_mask=attention, labels=labels).loss


def build_copying_model(directory: Path, seed: int = SEED) -> Path:
    """Pretrain the model on repeated runs; save it with its tokenizer in `directory`."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    tokenizer.chat_template = CHAT_TEMPLATE_WITHOUT_TOOLS
    config = qwen2_config(tokenizer, num_attention_heads=4, num_key_value_heads=4, head_dim=32)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = config.eos_token_id
    vocabulary = [token for token in range(len(tokenizer)) if token not in tokenizer.all_special_ids]
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for _ in range(STEPS):
        loss = _copy_loss(model, _repeated_runs(rng, vocabulary, BATCH))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        final = float(_copy_loss(model, _repeated_runs(rng, vocabulary, 4 * BATCH)))
    if final > LEARNED:
        raise RuntimeError(
            f"the copying model did not learn to copy: loss {final:.2f} on repeats after {STEPS} steps"
        )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory


def _recipe_key(seed: int) -> str:
    own = Path(__file__).read_bytes()
    return hashlib.sha256(own + tiny_model_dir().name.encode() + str(seed).encode()).hexdigest()[:16]


def copying_model_dir(seed: int = SEED, cache: Path | None = None) -> Path:
    """The copying model's directory, built on first use (see `cached_model`)."""
    return cached_model(
        f"gymbus-copying-model-{_recipe_key(seed)}", lambda at: build_copying_model(at, seed), cache
    )
