"""Subjects are built from valid tokens only; every error code maps back to its class."""

from __future__ import annotations

import pytest

from gymbus import schemas
from gymbus.bus import subjects
from gymbus.bus.wire._codec import encode_error_reply, error_from_reply


def test_subjects_follow_the_design() -> None:
    assert subjects.model_responses("policy") == "gym.model.policy.responses"
    assert subjects.env_tool("weather", "get_weather") == "gym.env.weather.tool.get_weather"
    assert subjects.env_seed("weather") == "gym.env.weather.seed"
    assert subjects.env_verify("weather") == "gym.env.weather.verify"
    assert subjects.agent_run("a_simple_agent") == "gym.agent.a_simple_agent.run"
    assert subjects.tasks("a") == "gym.tasks.a"
    assert subjects.results("r1") == "gym.results.r1"


@pytest.mark.parametrize("bad", ["get weather", "a.b", "", "x>", "*"])
def test_a_name_that_is_not_one_token_is_refused(bad: str) -> None:
    with pytest.raises(schemas.NotFound, match="not a valid name"):
        subjects.env_tool("weather", bad)


@pytest.mark.parametrize(
    "error",
    [
        schemas.BadRequest("bad"),
        schemas.NotFound("nope"),
        schemas.DeadlineExceeded("late"),
        schemas.FunctionFailed("boom"),
        schemas.UpstreamFailed("model down"),
        schemas.NoResponders("nobody"),
        schemas.RequestTimeout("slow"),
        schemas.PayloadTooLarge("big"),
    ],
)
def test_error_replies_round_trip_to_the_same_class(error: schemas.GymError) -> None:
    body, headers = encode_error_reply(error)
    assert headers["Nats-Service-Error-Code"] == error.code
    back = error_from_reply(headers, body, "gym.x")
    assert type(back) is type(error)
    assert back is not None and back.message == error.message and back.subject == "gym.x"


def test_error_header_is_one_line() -> None:
    _, headers = encode_error_reply(schemas.BadRequest("line one\nline two"))
    assert "\n" not in headers["Nats-Service-Error"]


def test_a_normal_reply_is_not_an_error() -> None:
    assert error_from_reply(None, b"{}", "s") is None
    assert error_from_reply({"Gym-Session": "x"}, b"{}", "s") is None


def test_secrets_in_urls_are_redacted() -> None:
    assert schemas.redact_url("nats://user:secret@host:4222") == "nats://***@host:4222"
    assert "secret" not in schemas.redact_url("nats://a:secret@h1:1,nats://h2:2")
    assert schemas.redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_every_timeout_and_limit_is_finite() -> None:
    for value in (*vars(schemas.DEFAULT_TIMEOUTS).values(), *vars(schemas.DEFAULT_LIMITS).values()):
        assert 0 < value < float("inf")
