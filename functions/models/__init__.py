"""Model adapters: the offline scripted policy, any OpenAI-compatible endpoint, and open
models served by vLLM or SGLang (with token capture for training)."""

from .._spec import Model, ModelFunction, ModelOptions
from .offline import MODEL as OFFLINE

__all__ = ["MODELS"]


def _openai(options: ModelOptions) -> ModelFunction:
    # The openai SDK (pydantic, its HTTP stack) takes a few hundred ms and tens of MB to
    # import: only a worker that serves this adapter loads it, when it builds it.
    from .openai_model import OpenAIModel

    return OpenAIModel(options)


OPENAI = Model(
    name="openai",
    make=_openai,
    description="Any OpenAI-compatible endpoint (Responses API or Chat Completions) via the openai SDK.",
)


def _vllm(options: ModelOptions) -> ModelFunction:
    from .vllm_model import VLLMModel  # aiohttp: loaded only by a worker that serves it

    return VLLMModel(options)


VLLM = Model(
    name="vllm",
    make=_vllm,
    description="Open models served by vLLM or SGLang (Chat Completions), with token capture for training.",
    follows_policies=True,
)

MODELS: dict[str, Model] = {model.name: model for model in (OFFLINE, OPENAI, VLLM)}
"""Every model adapter, by name."""
