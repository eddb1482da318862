"""Workplace session state: only the calls that changed something are stored, in the session
store, so any replica (any `Session` over the same store) serves any call."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gymbus.functions import MemoryState, Session
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import ResponsesCreateParams, SeedRequest

ENV = ENVIRONMENTS["workplace_assistant"]
TOOLS = {tool.name: tool for tool in ENV.tools}
SEED = SeedRequest(responses_create_params=ResponsesCreateParams(input="Help me with my inbox."))


async def call(session: Session, tool: str, /, **args: Any) -> Any:
    return msgspec.to_builtins(await TOOLS[tool].fn(args, session))["output"]


async def seeded(store: MemoryState, session_id: str) -> Session:
    session = Session(id=session_id, state=store)
    await ENV.seed(SEED, session)
    return session


async def test_only_changing_calls_are_stored_and_any_replica_sees_them() -> None:
    store = MemoryState()
    first = await seeded(store, "s1")
    await call(first, "email_search_emails", query="carlos")
    await call(first, "email_delete_email", email_id="99999999")  # not found: changes nothing
    assert json.loads(store.values["s1"]) == {"calls": []}
    await call(first, "email_delete_email", email_id="00000057", ignored=None)
    assert json.loads(store.values["s1"]) == {"calls": [["email_delete_email", {"email_id": "00000057"}]]}
    replica = Session(id="s1", state=store)  # another worker, same store
    assert await call(replica, "email_delete_email", email_id="00000057") == "Email not found."
    assert len(store.values["s1"]) < 200  # a diff, not the tables


async def test_sessions_do_not_share_state_and_seeding_starts_afresh() -> None:
    store = MemoryState()
    one, two = await seeded(store, "one"), await seeded(store, "two")
    assert await call(one, "calendar_delete_event", event_id="00000252") == "Event deleted successfully."
    assert await call(two, "calendar_get_event_information_by_id", event_id="00000252", field="event_id") == {
        "event_id": "00000252"
    }
    one = await seeded(store, "one")
    assert await call(one, "calendar_delete_event", event_id="00000252") == "Event deleted successfully."


async def test_the_in_place_duration_conversion_survives_between_calls() -> None:
    store = MemoryState()
    session = await seeded(store, "s")
    await call(session, "analytics_get_average_session_duration")
    [visit] = await call(
        Session(id="s", state=store), "analytics_get_visitor_information_by_id", visitor_id="0860"
    )
    assert visit["session_duration_seconds"] == 4.0
    assert len(json.loads(store.values["s"])["calls"]) == 1


async def test_created_ids_continue_across_calls() -> None:
    session = await seeded(MemoryState(), "s")
    event = {"event_name": "A", "participant_email": "a@atlas.com", "event_start": "2023-12-01 10:00:00"}
    assert await call(session, "calendar_create_event", **event, duration="30") == "00000300"
    assert await call(session, "calendar_create_event", **event, duration="30") == "00000301"
