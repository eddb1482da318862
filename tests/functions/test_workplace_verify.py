"""The workplace reward: 1.0 iff the predicted calls leave the tables the ground-truth calls
leave (NeMo Gym's `is_correct`), pinned with hand-built responses and the example rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gymbus import bus, schemas
from gymbus.functions import Session
from gymbus.functions.registry import ENVIRONMENTS

ENV = ENVIRONMENTS["workplace_assistant"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workplace_assistant.jsonl"
ROWS = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]


def fc(name: str, /, **arguments: Any) -> dict[str, Any]:
    """A ground-truth entry (and the arguments of a predicted call): arguments as JSON text."""
    return {"name": name, "arguments": json.dumps(arguments)}


def response(*calls: dict[str, Any]) -> dict[str, Any]:
    output = [{"type": "function_call", "call_id": f"c{i}", **call} for i, call in enumerate(calls)]
    output.append(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}
    )
    return {"id": "r", "created_at": 0, "model": "m", "output": output}


async def reward(
    predicted: list[dict[str, Any]], ground_truth: list[Any], row: dict[str, Any] | None = None
) -> float:
    body = {
        **(row or {"responses_create_params": {"input": "do it"}}),
        "ground_truth": ground_truth,
        "response": response(*predicted),
    }
    request = bus.wire.decode(msgspec.json.encode(body), ENV.verify_request)
    return (await ENV.verify(request, Session(id="verify"))).reward


REPLY = fc(
    "email_reply_email", email_id="00000057", body="Thanks for the update - I will get back to you tomorrow."
)
LOST = [
    fc("customer_relationship_manager_update_customer", customer_id=c, field="status", new_value="Lost")
    for c in ("00000037", "00000195")
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: str(row["id"]))
async def test_each_example_rows_ground_truth_earns_one(row: dict[str, Any]) -> None:
    assert await reward(row["ground_truth"], row["ground_truth"], row) == 1.0


@pytest.mark.parametrize("row", ROWS, ids=lambda row: str(row["id"]))
async def test_doing_nothing_earns_zero_on_each_example_row(row: dict[str, Any]) -> None:
    assert await reward([], row["ground_truth"], row) == 0.0


async def test_a_different_final_state_earns_zero() -> None:
    other_body = fc("email_reply_email", email_id="00000057", body="Thanks!")
    assert await reward([other_body], [REPLY]) == 0.0
    assert await reward([REPLY, REPLY], [REPLY]) == 0.0  # one reply too many
    assert await reward(LOST[:1], LOST) == 0.0  # one update missing


async def test_the_same_state_through_different_calls_earns_one() -> None:
    lookups = [
        fc("email_search_emails", query="carlos prototype report generation"),
        fc("company_directory_find_email_address", name="carlos"),
    ]
    assert await reward([*lookups, REPLY], [REPLY]) == 1.0  # reads change nothing
    assert await reward(LOST[::-1], LOST) == 1.0  # independent updates in another order
    renamed = [
        fc("calendar_update_event", event_id="00000252", field="event_name", new_value="Draft"),
        fc(
            "calendar_update_event",
            event_id="00000252",
            field="event_name",
            new_value="Risk Management Forum",
        ),
    ]
    assert await reward(renamed, renamed[1:]) == 1.0  # an overwritten value leaves no trace
    task = {"task_name": "x", "assigned_to_email": "leila.azizi@atlas.com", "due_date": "2023-12-01"}
    created_and_deleted = [
        fc("project_management_create_task", **task, list_name="Backlog", board="Design"),
        fc("project_management_delete_task", task_id="00000300"),
    ]
    assert await reward(created_and_deleted, []) == 1.0


async def test_failing_and_malformed_calls_are_skipped() -> None:
    failing = [
        fc(
            "customer_relationship_manager_update_customer",
            customer_id="00000037",
            field="status",
            new_value="lost",
        ),
        fc("no_such_tool", x=1),
        {"name": "email_delete_email", "arguments": "{not json"},
        {"name": "email_delete_email", "arguments": '["00000057"]'},
        fc("email_delete_email", email_id="00000057", reason="spam"),  # unexpected argument: raises, skipped
    ]
    assert await reward([*failing, *LOST], LOST) == 1.0
    assert await reward(failing, []) == 1.0
    assert await reward([], ["not a call", {"name": "email_delete_email"}]) == 1.0  # no runnable ground truth


async def test_text_compares_case_insensitively_except_status_list_and_board() -> None:
    shouting = fc(
        "email_reply_email", email_id="00000057", body=json.loads(REPLY["arguments"])["body"].upper()
    )
    assert await reward([shouting], [REPLY]) == 1.0
    customer = {"customer_name": "Ann Lee", "assigned_to_email": "Raj.Patel@atlas.com"}
    added = fc("customer_relationship_manager_add_customer", **customer, status="Won")
    lower_name = fc(
        "customer_relationship_manager_add_customer", **{**customer, "customer_name": "ann lee"}, status="Won"
    )
    lower_status = fc("customer_relationship_manager_add_customer", **customer, status="won")
    assert await reward([lower_name], [added]) == 1.0
    assert await reward([lower_status], [added]) == 0.0


async def test_values_that_are_not_text_never_match_text() -> None:
    event = {"event_name": "Sync", "participant_email": "a@atlas.com", "event_start": "2023-12-01 10:00:00"}
    as_text = fc("calendar_create_event", **event, duration="30")
    as_number = fc("calendar_create_event", **event, duration=30)
    assert await reward([as_number], [as_text]) == 0.0  # NeMo Gym's lower-casing turns 30 into NaN


async def test_row_labels_count_as_nemo_gyms_dataframe_index_does() -> None:
    delete = fc("email_delete_email", email_id="00000057")
    send = fc("email_send_email", recipient="a@atlas.com", subject="S", body="B")
    # Same rows either way, but sending renumbers the rows and deleting leaves a gap.
    assert await reward([delete, send], [send, delete]) == 0.0
    assert await reward([send, delete], [send, delete]) == 1.0


async def test_null_arguments_are_replayed_as_given() -> None:
    customer = {"customer_name": "Ann", "assigned_to_email": "raj.patel@atlas.com", "status": "Won"}
    with_null = fc("customer_relationship_manager_add_customer", **customer, notes=None)
    omitted = fc("customer_relationship_manager_add_customer", **customer)
    assert await reward([with_null], [omitted]) == 0.0  # notes None, not the default ""


def test_a_row_without_ground_truth_is_a_bad_request() -> None:
    body = {"responses_create_params": {"input": "x"}, "response": response()}
    with pytest.raises(schemas.BadRequest, match="ground_truth"):
        bus.wire.decode(msgspec.json.encode(body), ENV.verify_request)
