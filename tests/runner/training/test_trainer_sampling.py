"""The sampling parameters a trainer sets are the ones its rollouts are asked for, complete."""

from __future__ import annotations

import json

import pytest

from gymbus.runner import Sampling
from gymbus.schemas import ResponsesCreateParams

trl = pytest.importorskip("trl")


def config(**settings: object) -> object:
    return trl.GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none", **settings)


def params(extra_body: dict[str, object] | None = None, **fields: object) -> ResponsesCreateParams:
    metadata = {"extra_body": json.dumps(extra_body)} if extra_body is not None else None
    return ResponsesCreateParams(input="hi", metadata=metadata, **fields)  # type: ignore[arg-type]


def sent(request: ResponsesCreateParams) -> dict[str, object]:
    """What the `vllm` model function sends for `request`: its own fields, then extra_body."""
    assert isinstance(request.metadata, dict)
    extra = json.loads(request.metadata["extra_body"])
    own = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_output_tokens,
    }
    return {**own, **extra}


def test_every_sampling_parameter_is_sent_so_no_server_default_applies() -> None:
    trainer = config(temperature=0.7, top_p=0.95, max_completion_length=321)
    request = Sampling.of(trainer).apply(params(temperature=0.2), "row 0", training=True)
    assert sent(request) == {
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 321,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }


def test_the_trainers_own_settings_and_generation_kwargs_are_sent() -> None:
    trainer = config(
        top_k=20, min_p=0.05, repetition_penalty=1.1, generation_kwargs={"presence_penalty": 0.5}
    )
    request = Sampling.of(trainer).apply(params(), "row 0", training=True)
    expected = {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5}
    assert {key: sent(request)[key] for key in expected} == expected


def test_other_extra_body_keys_of_a_row_are_kept() -> None:
    row = params({"chat_template_kwargs": {"enable_thinking": False}})
    request = Sampling.of(config()).apply(row, "row 0", training=True)
    assert sent(request)["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent(request)["top_k"] == 0


def test_a_row_that_would_override_the_trainers_sampling_is_refused_in_training() -> None:
    row = params({"top_k": 5, "temperature": 0.1})
    with pytest.raises(ValueError) as refused:
        Sampling.of(config()).apply(row, "task row 3 of the trainer's dataset (data.jsonl:4)", training=True)
    message = str(refused.value)
    assert "task row 3 of the trainer's dataset (data.jsonl:4)" in message
    assert "responses_create_params.metadata.extra_body.top_k" in message
    assert "responses_create_params.metadata.extra_body.temperature" in message


def test_in_evaluation_the_rows_own_sampling_applies() -> None:
    request = Sampling.of(config()).apply(params({"top_k": 5}), "row 0", training=False)
    assert sent(request)["top_k"] == 5


def test_an_extra_body_that_is_not_a_json_object_is_refused() -> None:
    row = ResponsesCreateParams(input="hi", metadata={"extra_body": "[1]"})
    with pytest.raises(ValueError, match=r"row 0: responses_create_params.metadata.extra_body is not a JSON"):
        Sampling.of(config()).apply(row, "row 0", training=True)
