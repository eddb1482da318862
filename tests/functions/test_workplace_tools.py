"""The 27 workplace tools answer as NeMo Gym's do: results, messages and errors, over one
seeded session whose state lives in the session store."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gymbus.functions import Session
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import NotFound, ResponsesCreateParams, SeedRequest

ENV = ENVIRONMENTS["workplace_assistant"]
TOOLS = {tool.name: tool for tool in ENV.tools}
SEED = SeedRequest(responses_create_params=ResponsesCreateParams(input="Help me with my inbox."))


@pytest.fixture
async def session() -> Session:
    seeded = Session(id="workplace-test")
    await ENV.seed(SEED, seeded)
    return seeded


async def call(session: Session, tool: str, /, **args: Any) -> Any:
    """The tool's `output`, as the model reads it."""
    reply = msgspec.json.decode(msgspec.json.encode(await TOOLS[tool].fn(args, session)))
    assert set(reply) == {"output"}
    return reply["output"]


def test_the_27_tools_have_nemo_gyms_names_and_agent_settings() -> None:
    assert len(TOOLS) == 27
    assert {"email_reply_email", "calendar_create_event", "company_directory_find_email_address"} <= set(
        TOOLS
    )
    prefixes = {"company", "email", "calendar", "analytics", "project", "customer"}
    assert {name.split("_")[0] for name in TOOLS} == prefixes
    assert ENV.agents == ("workplace_assistant_simple_agent",) and ENV.max_steps == 6


async def test_a_reply_is_wrapped_in_output_as_on_nemo_gyms_wire(session: Session) -> None:
    reply = await TOOLS["email_send_email"].fn(
        {"recipient": "aisha.chen@atlas.com", "subject": "regarding something", "body": "some body"}, session
    )
    assert msgspec.json.encode(reply) == b'{"output":"Email sent successfully."}'


async def test_an_unseeded_session_is_a_readable_not_found(session: Session) -> None:
    with pytest.raises(NotFound, match="Session not initialized. Please call seed_session first."):
        await call(Session(id="never-seeded"), "email_delete_email", email_id="00000057")


async def test_unexpected_and_null_arguments(session: Session) -> None:
    assert await call(
        session, "email_get_email_information_by_id", email_id="00000057", field="subject", cc="x"
    ) == (
        "Error executing tool 'email_get_email_information_by_id': "
        "EmailTool.get_email_information_by_id() got an unexpected keyword argument 'cc'"
    )
    # null arguments are dropped before the call, so the tool's default applies
    assert await call(session, "company_directory_find_email_address", name=None) == "Name not provided."


# company directory


async def test_find_email_address(session: Session) -> None:
    assert await call(session, "company_directory_find_email_address", name="akira") == [
        "akira.sato@atlas.com"
    ]
    assert "anaya.patel@atlas.com" in await call(session, "company_directory_find_email_address", name="AN")
    assert await call(session, "company_directory_find_email_address") == "Name not provided."
    assert await call(session, "company_directory_find_email_address", name=5) == (
        "Error executing tool 'company_directory_find_email_address': 'int' object has no attribute 'lower'"
    )


# email


async def test_get_email_information_by_id(session: Session) -> None:
    subject = "Task Update on Develop prototype for report generation"
    assert await call(session, "email_get_email_information_by_id", email_id="00000057", field="subject") == {
        "subject": subject
    }
    assert await call(session, "email_get_email_information_by_id", email_id="00000057", field="to") == (
        "Field 'to' not found. Available fields: email_id, inbox/outbox, sender/recipient, subject, "
        "sent_datetime, body"
    )
    assert (
        await call(session, "email_get_email_information_by_id", email_id="1", field="body")
        == "Email not found."
    )
    assert (
        await call(session, "email_get_email_information_by_id", email_id="00000057") == "Field not provided."
    )


async def test_search_emails(session: Session) -> None:
    found = await call(
        session, "email_search_emails", query="carlos prototype report generation", page_size=2
    )
    assert [email["email_id"] for email in found["emails"]] == ["00000057", "00000280"]  # newest first
    assert found["pagination"] == {"total_emails": 2, "page": 1, "page_size": 2, "total_pages": 1}
    assert (
        await call(session, "email_search_emails", query="carlos", date_min="2023-11-29")
        == "No emails found."
    )
    assert await call(session, "email_search_emails", query="raj", page_size="3") == (
        "Error searching emails: unsupported operand type(s) for +: 'int' and 'str'"
    )


async def test_send_email_then_find_it(session: Session) -> None:
    assert await call(
        session, "email_send_email", recipient="Raj.Patel@Atlas.com", subject="Hi", body="One"
    ) == ("Email sent successfully.")
    sent = await call(session, "email_search_emails", query="one raj")
    assert sent["emails"][0] == {
        "email_id": "500",  # the largest ID plus one, not zero-padded
        "inbox/outbox": "outbox",
        "sender/recipient": "raj.patel@atlas.com",
        "subject": "Hi",
        "sent_datetime": "2023-11-30 23:59:00",
        "body": "One",
    }
    assert await call(session, "email_send_email", recipient="raj", subject="Hi", body="x") == (
        "Invalid recipient email address."
    )
    assert await call(session, "email_send_email", recipient="a@b.com", subject="Hi") == (
        "Recipient, subject, or body not provided."
    )


async def test_delete_email(session: Session) -> None:
    assert await call(session, "email_delete_email", email_id="00000057") == "Email deleted successfully."
    assert await call(session, "email_delete_email", email_id="00000057") == "Email not found."
    assert await call(session, "email_delete_email") == "Email ID not provided."


async def test_forward_email(session: Session) -> None:
    assert await call(
        session, "email_forward_email", email_id="00000057", recipient="Akira.Sato@atlas.com"
    ) == ("Email forwarded successfully.")
    forwarded = await call(session, "email_get_email_information_by_id", email_id="500", field="subject")
    assert forwarded == {"subject": "FW: Task Update on Develop prototype for report generation"}
    assert (
        await call(session, "email_forward_email", email_id="00000057")
        == "Email ID or recipient not provided."
    )


async def test_reply_email(session: Session) -> None:
    assert (
        await call(session, "email_reply_email", email_id="00000057", body="Thanks")
        == "Email replied successfully."
    )
    to = await call(session, "email_get_email_information_by_id", email_id="500", field="sender/recipient")
    assert to == {"sender/recipient": "carlos.rodriguez@atlas.com"}
    assert await call(session, "email_reply_email", email_id="99999999", body="Thanks") == "Email not found."


# calendar


async def test_get_event_information_by_id(session: Session) -> None:
    assert await call(
        session, "calendar_get_event_information_by_id", event_id="00000252", field="event_name"
    ) == {"event_name": "brainstorming session"}
    assert await call(
        session, "calendar_get_event_information_by_id", event_id="252", field="event_name"
    ) == ("Invalid event ID format. Expected 8-digit ID.")
    assert await call(session, "calendar_get_event_information_by_id", event_id="00000252", field="room") == (
        "Invalid field. Available fields are: event_id, event_name, participant_email, event_start, duration"
    )


async def test_search_events(session: Session) -> None:
    found = await call(
        session,
        "calendar_search_events",
        time_min="2023-12-01 00:00:00",
        time_max="2023-12-01 23:59:59",
        page=2,
        page_size=2,
    )
    assert [event["event_start"] for event in found["events"]] == [
        "2023-12-01 13:30:00",
        "2023-12-01 12:00:00",
    ]
    assert found["pagination"] == {"total_events": 6, "page": 2, "page_size": 2, "total_pages": 3}
    assert await call(session, "calendar_search_events", query="sync up", time_min="soon") == (
        "Invalid time_min format. Expected YYYY-MM-DD HH:MM:SS."
    )
    assert await call(session, "calendar_search_events", query="no such meeting") == "No events found."


async def test_create_event(session: Session) -> None:
    created = await call(
        session,
        "calendar_create_event",
        event_name="Risk Review",
        participant_email="Raj.Patel@atlas.com",
        event_start="2023-12-04 10:00:00",
        duration="60",
    )
    assert created == "00000300"
    [event] = (await call(session, "calendar_search_events", query="risk review"))["events"]
    assert event["participant_email"] == "raj.patel@atlas.com"
    start = {"event_name": "x", "participant_email": "a@b.com", "event_start": "2023-12-04 10:00:00"}
    assert await call(session, "calendar_create_event", **start, duration="0") == (
        "Duration must be a positive number of minutes."
    )
    assert await call(session, "calendar_create_event", **start, duration="an hour") == (
        "Invalid duration format. Expected a number of minutes."
    )
    assert await call(
        session, "calendar_create_event", **{**start, "event_start": "next week"}, duration="30"
    ) == ("Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS.")


async def test_delete_event(session: Session) -> None:
    assert await call(session, "calendar_delete_event", event_id="00000252") == "Event deleted successfully."
    assert await call(session, "calendar_delete_event", event_id="00000252") == "Event not found."


async def test_update_event(session: Session) -> None:
    assert (
        await call(
            session,
            "calendar_update_event",
            event_id="00000252",
            field="participant_email",
            new_value="A@Atlas.com",
        )
        == "Event updated successfully."
    )
    assert await call(
        session, "calendar_get_event_information_by_id", event_id="00000252", field="participant_email"
    ) == {"participant_email": "a@atlas.com"}
    assert await call(
        session, "calendar_update_event", event_id="00000252", field="event_id", new_value="1"
    ) == ("Invalid field. Available fields are: event_name, participant_email, event_start, duration")
    assert await call(session, "calendar_update_event", event_id="00000252", field="event_name") == (
        "Event ID, field, or new value not provided."
    )


# analytics


async def test_get_visitor_information_by_id(session: Session) -> None:
    assert await call(session, "analytics_get_visitor_information_by_id", visitor_id="0860") == [
        {
            "date_of_visit": "2023-10-22",
            "visitor_id": "0860",
            "page_views": "8",
            "session_duration_seconds": "4",
            "traffic_source": "referral",
            "user_engaged": False,
        }
    ]
    assert (
        await call(session, "analytics_get_visitor_information_by_id", visitor_id="x") == "Visitor not found."
    )


async def test_create_plot(session: Session) -> None:
    plot = {"time_min": "2023-10-22", "time_max": "2023-10-22", "value_to_plot": "total_visits"}
    assert await call(session, "analytics_create_plot", **plot, plot_type="bar") == (
        "plots/2023-10-22_2023-10-22_total_visits_bar.png"
    )
    assert await call(session, "analytics_create_plot", **plot, plot_type="pie") == (
        "Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'"
    )
    assert await call(
        session, "analytics_create_plot", **{**plot, "value_to_plot": "visits"}, plot_type="bar"
    ) == (
        "Value to plot must be one of 'total_visits', 'session_duration_seconds', 'user_engaged', "
        "'visits_direct', 'visits_referral', 'visits_search_engine', 'visits_social_media'"
    )


RANGE = {"time_min": "2023-11-28", "time_max": "2023-11-30"}


async def test_total_visits_count(session: Session) -> None:
    assert await call(session, "analytics_total_visits_count", **RANGE) == {
        "2023-11-28": 19,
        "2023-11-29": 9,
        "2023-11-30": 7,
    }
    assert await call(session, "analytics_total_visits_count", time_min=5) == (
        "Error executing tool 'analytics_total_visits_count': '>=' not supported between instances of 'str' and 'int'"
    )


async def test_engaged_users_count(session: Session) -> None:
    assert await call(session, "analytics_engaged_users_count", **RANGE) == {
        "2023-11-28": 8,
        "2023-11-29": 4,
        "2023-11-30": 4,
    }
    assert await call(session, "analytics_engaged_users_count", time_max=5) == (
        "Error executing tool 'analytics_engaged_users_count': '<=' not supported between instances of 'str' and 'int'"
    )


async def test_traffic_source_count(session: Session) -> None:
    assert await call(session, "analytics_traffic_source_count", **RANGE, traffic_source="search engine") == {
        "2023-11-28": 2,
        "2023-11-29": 1,
        "2023-11-30": 0,
    }
    assert await call(session, "analytics_traffic_source_count", **RANGE, source="direct") == (
        "Error executing tool 'analytics_traffic_source_count': "
        "AnalyticsTool.traffic_source_count() got an unexpected keyword argument 'source'"
    )


async def test_average_session_duration(session: Session) -> None:
    assert await call(session, "analytics_get_average_session_duration", **RANGE) == {
        "2023-11-28": 20.31578947368421,
        "2023-11-29": 20.666666666666668,
        "2023-11-30": 18.142857142857142,
    }
    # Without a range NeMo Gym converts the durations to numbers in place: later lookups show it.
    assert len(await call(session, "analytics_get_average_session_duration")) > 60
    [visit] = await call(session, "analytics_get_visitor_information_by_id", visitor_id="0860")
    assert visit["session_duration_seconds"] == 4.0
    assert await call(session, "analytics_get_average_session_duration", time_min=True) == (
        "Error executing tool 'analytics_get_average_session_duration': "
        "'>=' not supported between instances of 'str' and 'bool'"
    )


# project management


async def test_get_task_information_by_id(session: Session) -> None:
    assert await call(
        session, "project_management_get_task_information_by_id", task_id="00000149", field="board"
    ) == {"board": "Front end"}
    assert await call(
        session, "project_management_get_task_information_by_id", task_id="00000149", field="x"
    ) == ("Field not found.")
    assert await call(
        session, "project_management_get_task_information_by_id", task_id="1", field="board"
    ) == ("Task not found.")


async def test_search_tasks(session: Session) -> None:
    found = await call(
        session,
        "project_management_search_tasks",
        assigned_to_email="Leila.Azizi@atlas.com",
        list_name="backlog",
        board="front",
    )
    assert found[0] == {
        "task_id": "00000149",
        "task_name": "Add animation to carousel",
        "assigned_to_email": "leila.azizi@atlas.com",
        "list_name": "Backlog",
        "due_date": "2023-11-27",
        "board": "Front end",
    }
    assert all(task["list_name"] == "Backlog" and task["board"] == "Front end" for task in found)
    assert await call(session, "project_management_search_tasks") == "No search parameters provided."
    assert await call(session, "project_management_search_tasks", assigned_to_email="leila") == (
        "Invalid email format for assigned_to_email."
    )
    assert await call(session, "project_management_search_tasks", task_name="(") == (
        "Error executing tool 'project_management_search_tasks': missing ), unterminated subpattern at position 0"
    )


TASK = {"task_name": "Write docs", "assigned_to_email": "Leila.Azizi@atlas.com", "due_date": "2023-12-08"}


async def test_create_task(session: Session) -> None:
    assert await call(
        session, "project_management_create_task", **TASK, list_name="Backlog", board="Design"
    ) == ("00000300")
    assert await call(
        session,
        "project_management_get_task_information_by_id",
        task_id="00000300",
        field="assigned_to_email",
    ) == {"assigned_to_email": "leila.azizi@atlas.com"}
    assert await call(
        session, "project_management_create_task", **TASK, list_name="Done", board="Design"
    ) == ("List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'.")
    assert await call(
        session, "project_management_create_task", **TASK, list_name="Backlog", board="design"
    ) == ("Board not valid. Please choose from: 'Back end', 'Front end', 'Design'.")
    outsider = {**TASK, "assigned_to_email": "nobody@atlas.com"}
    assert await call(
        session, "project_management_create_task", **outsider, list_name="Backlog", board="Design"
    ) == ("Assignee email not valid. Please choose from the list of team members.")


async def test_delete_task(session: Session) -> None:
    assert (
        await call(session, "project_management_delete_task", task_id="00000149")
        == "Task deleted successfully."
    )
    assert await call(session, "project_management_delete_task", task_id="00000149") == "Task not found."


async def test_update_task(session: Session) -> None:
    update = {"task_id": "00000149", "field": "list_name"}
    assert await call(session, "project_management_update_task", **update, new_value="Completed") == (
        "Task updated successfully."
    )
    assert await call(session, "project_management_update_task", **update, new_value="Done") == (
        "List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'."
    )
    assert await call(
        session, "project_management_update_task", task_id="00000149", field="x", new_value="y"
    ) == ("Field not valid.")


# customer relationship manager


async def test_search_customers(session: Session) -> None:
    found = await call(
        session,
        "customer_relationship_manager_search_customers",
        assigned_to_email="akira",
        product_interest="software",
        status="lead",
    )
    first = found["customers"][0]
    assert (
        first["customer_id"] == "00000095" and first["customer_phone"] is None
    )  # an empty CSV cell reads null
    assert found["pagination"]["total_customers"] == len(found["customers"])
    assert await call(session, "customer_relationship_manager_search_customers") == (
        "No search parameters provided. Please provide at least one parameter."
    )
    assert await call(session, "customer_relationship_manager_search_customers", customer_name="zzz") == (
        "No customers found."
    )


async def test_update_customer(session: Session) -> None:
    update = {"customer_id": "00000095", "field": "status"}
    assert await call(
        session, "customer_relationship_manager_update_customer", **update, new_value="Lost"
    ) == ("Customer updated successfully.")
    assert await call(
        session, "customer_relationship_manager_update_customer", **update, new_value="lost"
    ) == ("Status not valid. Please choose from: 'Qualified', 'Won', 'Lost', 'Lead', 'Proposal'")
    assert (
        await call(
            session,
            "customer_relationship_manager_update_customer",
            customer_id="1",
            field="status",
            new_value="Won",
        )
        == "Customer not found."
    )


async def test_add_customer(session: Session) -> None:
    assert (
        await call(
            session,
            "customer_relationship_manager_add_customer",
            customer_name="Ann Lee",
            assigned_to_email="Raj.Patel@atlas.com",
            status="Lead",
        )
        == "00000200"
    )
    [added] = (
        await call(session, "customer_relationship_manager_search_customers", customer_name="ann lee")
    )["customers"]
    assert (
        added["assigned_to_email"] == "raj.patel@atlas.com"
        and added["notes"] == ""
        and added["customer_email"] is None
    )
    assert await call(session, "customer_relationship_manager_add_customer", customer_name="Ann Lee") == (
        "Please provide all required fields: customer_name, assigned_to_email, status."
    )


async def test_delete_customer(session: Session) -> None:
    deleting = {"customer_id": "00000009"}
    assert await call(session, "customer_relationship_manager_delete_customer", **deleting) == (
        "Customer deleted successfully."
    )
    assert (
        await call(session, "customer_relationship_manager_delete_customer", **deleting)
        == "Customer not found."
    )
