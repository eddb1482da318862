"""The sampling a trainer means, written into every model request of its rollouts.

GRPO's importance ratio compares the trainer's softmax (at its temperature) with the
sampler's logprobs, so the sampler must sample exactly what the trainer assumes. A vLLM
server fills every parameter a request leaves out from the model's
`generation_config.json` (`--generation-config auto`, vLLM's default): Qwen's instruct
models set `top_k` 20 and some a `repetition_penalty`. So a training rollout's requests
carry all of them, as TRL's own vLLM client sends them:

    temperature, top_p, max_output_tokens     the Responses API's own fields
    top_k, min_p, repetition_penalty,         `metadata.extra_body`, which the `vllm`
    presence_penalty, frequency_penalty       model function merges into each request

plus the trainer's `generation_kwargs`, which TRL applies after them. A task row whose
`metadata.extra_body` sets one of these would override the trainer (it is merged last),
so in training such a row is refused, naming it and the field; in evaluation the row's
value applies. A row's own `temperature`, `top_p` and `max_output_tokens` are replaced by
the trainer's: NeMo Gym datasets often carry an evaluation temperature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gymbus.schemas import ResponsesCreateParams

__all__ = ["SAMPLING_PARAMETERS", "Sampling"]

SAMPLING_PARAMETERS = frozenset(
    {
        "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "max_tokens", "max_completion_tokens", "min_tokens", "logit_bias",
    }
)  # fmt: skip
"""Request keys that change the distribution a vLLM server samples from (or its length)."""

_EXTRA_BODY = "extra_body"


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters of a training run, complete: no server default applies."""

    temperature: float
    top_p: float
    max_output_tokens: int | None
    top_k: int = 0
    """0: every token is considered (vLLM's and TRL's meaning)."""
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    """TRL's `generation_kwargs`, sent as vLLM sampling parameters after the others."""

    @classmethod
    def of(cls, args: Any) -> Sampling:
        """From a `GRPOConfig` (or `AsyncGRPOConfig`)."""
        kwargs = getattr(args, "generation_kwargs", None) or {}
        if isinstance(kwargs, str):  # TRL accepts a JSON string from the command line
            kwargs = json.loads(kwargs)
        return cls(
            temperature=float(args.temperature),
            top_p=float(args.top_p),
            max_output_tokens=args.max_completion_length,
            top_k=int(getattr(args, "top_k", None) or 0),
            min_p=float(getattr(args, "min_p", None) or 0.0),
            repetition_penalty=float(getattr(args, "repetition_penalty", None) or 1.0),
            generation_kwargs=dict(kwargs),
        )

    def extra_body(self) -> dict[str, Any]:
        """The parameters the Responses API has no field for, as vLLM request keys."""
        return {
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            **self.generation_kwargs,
        }

    def apply(self, params: ResponsesCreateParams, row: str, training: bool) -> ResponsesCreateParams:
        """`params` asking for this sampling. In training, a `metadata.extra_body` that sets a
        sampling parameter is a `ValueError` naming `row` and the field; in evaluation the
        row's value wins."""
        metadata = dict(params.metadata) if isinstance(params.metadata, dict) else {}
        own = _extra_body_of(metadata, row)
        overriding = sorted(SAMPLING_PARAMETERS & own.keys())
        if training and overriding:
            fields = ", ".join(f"responses_create_params.metadata.extra_body.{key}" for key in overriding)
            raise ValueError(
                f"{row} sets {fields}: in training every rollout samples with the trainer's parameters "
                "(it would learn from samples it did not ask for); remove it from the row"
            )
        metadata[_EXTRA_BODY] = json.dumps({**self.extra_body(), **own})
        return msgspec.structs.replace(
            params,
            temperature=self.temperature,
            top_p=self.top_p,
            max_output_tokens=self.max_output_tokens,
            metadata=metadata,
        )


def _extra_body_of(metadata: dict[str, str], row: str) -> dict[str, Any]:
    text = metadata.get(_EXTRA_BODY)
    if text is None:
        return {}
    try:
        extra = json.loads(text)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise ValueError(f"{row}: responses_create_params.metadata.extra_body is not a JSON object")
    return extra
