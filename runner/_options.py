"""Command-line options several commands share: the policy model's endpoint."""

from __future__ import annotations

from typing import Annotated

import typer

from gymbus.functions import ModelOptions

__all__ = [
    "ModelApi",
    "ModelKey",
    "ModelName",
    "ModelNameOrFunction",
    "ModelUrl",
    "TokenCapture",
    "model_options",
]

ModelUrl = Annotated[
    str | None,
    typer.Option(
        "--model-url",
        envvar="POLICY_BASE_URL",
        help="OpenAI-compatible endpoint (for `--model-api vllm`, several, comma-separated); "
        "unset = offline scripted policy.",
    ),
]
ModelName = Annotated[
    str | None, typer.Option("--model", envvar="POLICY_MODEL", help="Model name at that endpoint.")
]
ModelNameOrFunction = Annotated[
    str | None,
    typer.Option(
        "--model",
        envvar="POLICY_MODEL",
        help="Model name at --model-url; without it, the model function serving the policy: "
        "a Python file or module defining your own (FILE[:NAME]), or an installed model's name.",
    ),
]
"""`--model` where the command can serve the policy itself (`collect`, `talk`)."""
ModelKey = Annotated[
    str | None,
    typer.Option(
        "--model-api-key", envvar="POLICY_API_KEY", help="API key (prefer the env var).", show_default=False
    ),
]
ModelApi = Annotated[
    str,
    typer.Option(
        "--model-api",
        envvar="POLICY_API",
        help="`responses` (Responses API) or `chat` (Chat Completions) through the openai SDK; `vllm`: "
        "open models served by vLLM or SGLang, with token ids and logprobs for training.",
    ),
]
TokenCapture = Annotated[
    bool,
    typer.Option(
        envvar="POLICY_TOKEN_CAPTURE",
        help="With `--model-api vllm`: record each model call's token ids and logprobs in the rollouts.",
    ),
]


def model_options(
    url: str | None, model: str | None, key: str | None, api: str, token_capture: bool = True
) -> ModelOptions:
    if api not in ("responses", "chat", "vllm"):
        raise typer.BadParameter("must be `responses`, `chat` or `vllm`", param_hint="--model-api")
    return ModelOptions(base_url=url, model=model, api_key=key, api=api, token_capture=token_capture)
