"""A tiny random Qwen2 model with a locally trained ASCII tokenizer, built with no hub access.

The tokenizer is a byte-level BPE trained on a few hundred generated strings over an
ASCII-only alphabet (every token decodes to ASCII, so any sampled sequence is valid text),
with Qwen2.5's chat special tokens and a Qwen2.5-style chat template that renders tools
and tool calls in the Hermes format vLLM's `hermes` tool parser reads. The model is a
random 2-layer `Qwen2ForCausalLM` (hidden 128, head dim 64, float32).

`tiny_model_dir()` builds it once per machine into a cache directory named after a hash
of everything that shapes the files (seed, sizes, template, library versions), so the same
seed gives the same files and a changed recipe a fresh directory.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_tiny_model",
    "cached_model",
    "qwen2_config",
    "tiny_model_dir",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added tokens kept in decoded text (the tool parser and the reasoning split read them).
TEXT_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
VOCAB_SIZE = 400
SEED = 1234

CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call> tags:\\n' }}
{{- '<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls or [] %}
{%- set call = tool_call.function if tool_call.function is defined else tool_call %}
{%- if (loop.first and message.content) or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

_WORDS = (
    "the", "weather", "in", "city", "is", "cold", "warm", "sunny", "cloudy", "rainy", "windy", "snowy",
    "foggy", "what", "how", "today", "tomorrow", "paris", "tokyo", "lima", "oslo", "sf", "london",
    "you", "are", "a", "helpful", "assistant", "travel", "personal", "use", "get_weather", "to",
    "answer", "any", "question", "about", "briefly", "name", "arguments", "function", "call", "tool",
    "response", "user", "system", "json", "object", "type", "string", "properties", "description",
    "required", "parameters", "true", "false", "null", "i", "also", "need", "it", "like", "going",
    "out", "tn", "raining", "holiday", "trip", "weekend", "planning", "and", "or", "not", "yes", "no",
    "please", "thanks",
)  # fmt: skip


def _corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = [CHAT_TEMPLATE]
    for _ in range(400):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
        lines.append(" ".join(words))
        city = rng.choice(_WORDS).title()
        lines.append(f'{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}')
    lines.append("".join(chr(code) for code in range(32, 127)))
    return lines


def _train_tokenizer(seed: int) -> object:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # The byte-level symbols of the 128 ASCII bytes only: no token can hold a non-ASCII byte.
    ascii_alphabet = [symbol for byte, symbol in bytes_to_unicode().items() if byte < 128]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=ascii_alphabet,
        limit_alphabet=len(ascii_alphabet),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    # Not special (as in Qwen2.5): decoding with `skip_special_tokens` keeps them in the text.
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False) for token in TEXT_TOKENS])
    return tokenizer


def build_tiny_model(directory: Path, seed: int = SEED) -> Path:
    """Write the tokenizer and a random model (`save_pretrained` files) into `directory`."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(seed),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=2048,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    config = qwen2_config(
        tokenizer,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        initializer_range=0.2,  # peakier than the default 0.02: logprobs far from uniform
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = config.eos_token_id
    model.save_pretrained(directory)
    return directory


def qwen2_config(tokenizer: Any, **shape: Any) -> Any:
    """A 2-layer, 128-wide float32 `Qwen2Config` for `tokenizer` (tied embeddings, its
    end-of-turn and padding tokens); `shape` sets the heads and the rest."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        dtype="float32",
        **shape,
    )


def _recipe_key(seed: int) -> str:
    import tokenizers
    import torch
    import transformers

    source = Path(__file__).read_bytes()
    versions = f"{seed}|{torch.__version__}|{transformers.__version__}|{tokenizers.__version__}"
    return hashlib.sha256(source + versions.encode()).hexdigest()[:16]


def tiny_model_dir(seed: int = SEED, cache: Path | None = None) -> Path:
    """The tiny model's directory, built on first use. `cache` defaults to
    `$GYMBUS_TEST_CACHE` or the system temp directory."""
    return cached_model(
        f"gymbus-tiny-qwen2-{_recipe_key(seed)}", lambda at: build_tiny_model(at, seed), cache
    )


def cached_model(name: str, build: Callable[[Path], None], cache: Path | None = None) -> Path:
    """The model directory `name` in `cache` (default `$GYMBUS_TEST_CACHE` or the system temp
    directory), made by `build(directory)` on first use."""
    root = cache or Path(os.environ.get("GYMBUS_TEST_CACHE") or tempfile.gettempdir())
    target = root / name
    if (target / "model.safetensors").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=root))
    try:
        build(scratch)
        scratch.rename(target)  # atomic: a concurrent builder either wins or finds it built
    except OSError:
        if not (target / "model.safetensors").exists():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
