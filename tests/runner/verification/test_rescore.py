"""Stored rollout rows checked for re-verification, and rescored by a new verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gymbus.functions.registry import AGENTS
from gymbus.runner.verification._rescore import (
    Disagreement,
    agrees,
    read_stored,
    rescored_row,
    unverified_row,
    verify_error,
)
from gymbus.schemas import BadRequest, InputError, RolloutFailed

AGENT = "example_single_tool_call_simple_agent"
KNOWN = AGENTS
RESPONSE = {
    "id": "resp_1",
    "created_at": 1.0,
    "model": "policy",
    "object": "response",
    "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "cold"}]}
    ],
}


def stored_row(**fields: Any) -> bytes:
    row = {
        "responses_create_params": {"input": "weather in sf?"},
        "response": RESPONSE,
        "reward": 1.0,
        "agent_ref": {"type": "responses_api_agents", "name": AGENT},
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        **fields,
    }
    return json.dumps({k: v for k, v in row.items() if v is not ...}).encode()


def test_a_gymbus_row_names_its_agent_environment_reward_and_key() -> None:
    stored = read_stored(stored_row(), "r.jsonl", 7, None, KNOWN)
    assert (stored.agent, stored.environment) == (AGENT, "example_single_tool_call")
    assert (stored.reward, stored.task_index, stored.rollout_index, stored.line) == (1.0, 3, 1, 7)
    assert stored.body == stored_row()


def test_a_row_without_agent_ref_takes_the_default_agent_and_its_own_wins() -> None:
    bare = stored_row(agent_ref=..., _ng_task_index=..., _ng_rollout_index=...)
    stored = read_stored(bare, "r.jsonl", 1, AGENT, KNOWN)
    assert (stored.agent, stored.task_index, stored.rollout_index) == (AGENT, None, None)
    with pytest.raises(RolloutFailed, match="'other_agent'"):
        read_stored(stored_row(agent_ref={"name": "other_agent"}), "r.jsonl", 1, AGENT, KNOWN)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (b"{oops", "r.jsonl:4: not a JSON object"),
        (b"[1, 2]", "r.jsonl:4: not a JSON object"),
        (stored_row(response=...), "r.jsonl:4: field `response`: missing"),
        (
            stored_row(response={**RESPONSE, "output": "x"}),
            "r.jsonl:4: field `response.output`: Expected `array`",
        ),
        (stored_row(response={"id": "r"}), "r.jsonl:4: field `response.created_at`"),
        (stored_row(responses_create_params=...), "r.jsonl:4: field `responses_create_params`: missing"),
        (stored_row(agent_ref=...), "r.jsonl:4: field `agent_ref`: missing, and no --agent was given"),
        (
            stored_row(agent_ref={"name": "a.b"}),
            "r.jsonl:4: field `agent_ref`: 'a.b' is not a valid agent name",
        ),
    ],
)
def test_rows_that_cannot_be_verified_say_where(row: bytes, message: str) -> None:
    with pytest.raises(InputError) as error:
        read_stored(row, "r.jsonl", 4, None, KNOWN)
    assert str(error.value).startswith(message)


def test_an_agent_without_a_built_in_environment_is_named() -> None:
    with pytest.raises(RolloutFailed) as error:
        read_stored(stored_row(agent_ref={"name": "mystery_agent"}), "r.jsonl", 2, None, KNOWN)
    assert error.value.failure_class == "unknown_agent"
    assert error.value.message.startswith("r.jsonl:2: field `agent_ref`: agent 'mystery_agent' has no")
    assert AGENT in error.value.message  # lists the agents that exist


@pytest.mark.parametrize("reward", ["1.0", True, None, ...])
def test_a_stored_reward_that_is_not_a_number_is_no_stored_reward(reward: object) -> None:
    assert read_stored(stored_row(reward=reward), "r.jsonl", 1, None, KNOWN).reward is None


def test_the_new_verdict_replaces_reward_and_extras_and_clears_failure_marks() -> None:
    body = stored_row(reward=0.0, extracted_answer="B", keep="me", _ng_failure_class="judge_failed",
                      _ng_failure_message="judge down")  # fmt: skip
    row, fields, reward = rescored_row(body, b'{"reward": 1.0, "extracted_answer": "C", "judge": "ok"}')
    decoded = json.loads(row)
    assert reward == 1.0 and decoded["reward"] == 1.0
    assert (decoded["extracted_answer"], decoded["judge"], decoded["keep"]) == ("C", "ok", "me")
    assert "_ng_failure_class" not in decoded and "_ng_failure_message" not in decoded
    assert decoded["response"] == RESPONSE and set(fields) == set(decoded)
    assert list(decoded)[:2] == ["responses_create_params", "response"]  # the row's own field order


@pytest.mark.parametrize("reply", [b'{"extracted_answer": "C"}', b'{"reward": "high"}', b"[]", b"nope"])
def test_a_reply_that_is_not_a_verdict_fails_the_row(reply: bytes) -> None:
    with pytest.raises(RolloutFailed) as error:
        rescored_row(stored_row(), reply)
    assert error.value.failure_class == "verify_failed"


def test_a_failure_row_keeps_the_row_and_names_its_line() -> None:
    failed = json.loads(unverified_row(stored_row(), 9, "verify_failed", "r.jsonl:9: boom"))
    assert (failed["_ng_input_line"], failed["_ng_failure_class"], failed["reward"]) == (
        9,
        "verify_failed",
        0.0,
    )
    assert failed["_ng_failure_message"] == "r.jsonl:9: boom" and failed["response"] == RESPONSE
    assert json.loads(unverified_row(b"{oops", 2, "invalid_input", "bad"))["_ng_input_line"] == 2


def test_verify_error_replies_name_the_field_they_reject() -> None:
    subject = "gym.env.x.verify"
    typed = BadRequest(
        "invalid verify request: Expected `str`, got `int` - at `$.expected_answer`", subject=subject
    )
    assert verify_error(typed, "r.jsonl", 5) == (
        "r.jsonl:5: field `expected_answer`: verify failed (bad_request): "
        "invalid verify request: Expected `str`, got `int` [gym.env.x.verify]"
    )
    missing = BadRequest("invalid verify request: Object missing required field `expected`", subject=subject)
    assert verify_error(missing, "r.jsonl", 5).startswith("r.jsonl:5: field `expected`: verify failed")
    plain = BadRequest("judge said no", subject=subject)
    assert (
        verify_error(plain, "r.jsonl", 5)
        == "r.jsonl:5: verify failed (bad_request): judge said no [gym.env.x.verify]"
    )


def test_rewards_agree_within_a_small_tolerance_only() -> None:
    assert agrees(1.0, 1.0) and agrees(0.1 + 0.2, 0.3) and agrees(0.5, 0.5 + 1e-7)
    assert not agrees(0.0, 1.0) and not agrees(0.5, 0.5001)


def test_a_disagreement_reads_as_file_line_key_and_both_rewards() -> None:
    found = Disagreement("r.jsonl", 7, AGENT, 3, 1, stored=0.0, new=1.0)
    assert found.describe() == "r.jsonl:7 (task 3, rollout 1): stored 0.0, new 1.0"
    assert (
        Disagreement("r.jsonl", 7, AGENT, None, None, 0.0, 1.0).describe() == "r.jsonl:7: stored 0.0, new 1.0"
    )
    assert json.loads(found.row()) == {
        "_ng_input_line": 7,
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": AGENT},
        "stored_reward": 0.0,
        "reward": 1.0,
    }


def test_a_nemo_gym_row_with_null_model_and_item_ids_is_read() -> None:
    """NeMo Gym writes every request parameter (`"model": null` too) and `"id": null` on tool outputs."""
    response = {
        **RESPONSE,
        "output": [{"type": "function_call_output", "call_id": "c", "output": "{}", "id": None}],
    }
    params = {
        "input": [{"role": "user", "content": "hi", "type": "message"}],
        "model": None,
        "tool_choice": None,
    }
    row = stored_row(responses_create_params=params, response=response, agent_ref=...)
    assert read_stored(row, "r.jsonl", 1, AGENT, KNOWN).agent == AGENT


def test_a_verifier_reporting_a_failure_fails_the_row_instead_of_scoring_it() -> None:
    stored = b'{"reward": 0.0, "expected_answer": "x", "_ng_failure_class": "old"}'
    reply = b'{"reward": 0.0, "_ng_failure_class": "judge_failed", "_ng_failure_message": "judge down"}'
    with pytest.raises(RolloutFailed) as failure:
        rescored_row(stored, reply)
    assert (failure.value.failure_class, failure.value.message) == ("judge_failed", "judge down")
