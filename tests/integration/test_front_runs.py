"""The front's `/run`s (`bus.front.RolloutRequests`) against a real nats-server: nobody waits
long for an agent nobody serves. An "agent" here is a service that answers pings and takes
no task, so a request waits for as long as the test wants; then it goes away."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import replace

from gymbus import bus
from gymbus.bus import Endpoint, ServiceHost, ServiceSpec
from gymbus.bus.front import OutcomeStatus, RolloutRequests
from gymbus.schemas import DEFAULT_TIMEOUTS


class GivenUp:
    """The front's own workers, as the test says: given up on for the agents in `why`."""

    def __init__(self, why: dict[str, str]) -> None:
        self.why = why

    def given_up(self, agent: str) -> str | None:
        return self.why.get(agent)

    def replacing(self, agent: str) -> bool:
        return False


ROW = json.dumps({"responses_create_params": {"input": "hi"}}).encode()


async def pretend_agent(url: str, name: str) -> ServiceHost:
    """A live service named `name` (pings answered) that takes none of its tasks."""

    async def idle(data: bytes, headers: Mapping[str, str]) -> bytes:
        return data

    nc = await bus.connect(url, name=f"pretending {name}")
    host = ServiceHost(nc)
    await host.add(ServiceSpec(name, "agent", (Endpoint("run", f"test.{name}.run", idle),)))
    return host


async def test_a_waiting_run_is_answered_503_once_its_agent_stays_unserved(own_server: str) -> None:
    timeouts = replace(DEFAULT_TIMEOUTS, unserved_grace=2.0)
    agent = "pretend_agent"
    pretending = await pretend_agent(own_server, agent)
    async with bus.open_bus(own_server, name="test front") as connection:
        requests = await RolloutRequests.open(connection, timeouts=timeouts)
        try:
            waiting = asyncio.create_task(requests.run(agent, ROW))
            await asyncio.sleep(1.5)
            assert not waiting.done() and requests.in_flight == 1  # served, just not taken yet
            await pretending.stop()
            await pretending.conn.close()
            gone = time.monotonic()
            outcome = await asyncio.wait_for(waiting, 30)
            answered_after = time.monotonic() - gone
            fresh = await requests.run(agent, ROW)
        finally:
            await requests.close()
    row = json.loads(outcome.body)
    assert outcome.status is OutcomeStatus.UNAVAILABLE and row["_ng_failure_class"] == "no_worker"
    assert row["_ng_failure_message"].startswith(f"no worker serves gym.agent.{agent}.run: ")
    assert timeouts.unserved_grace <= answered_after < timeouts.unserved_grace + 5
    assert fresh.status is OutcomeStatus.UNAVAILABLE  # a new request: at once


async def test_a_waiting_run_is_answered_at_once_where_its_workers_were_given_up_on(own_server: str) -> None:
    agent = "pretend_agent"
    pretending = await pretend_agent(own_server, agent)
    why: dict[str, str] = {}
    async with bus.open_bus(own_server, name="test front") as connection:
        requests = await RolloutRequests.open(connection, workers=GivenUp(why))
        try:
            waiting = asyncio.create_task(requests.run(agent, ROW))
            await asyncio.sleep(1.0)
            await pretending.stop()
            await pretending.conn.close()
            why[agent] = "its worker processes kept exiting as they started: ImportError: no module named x"
            gone = time.monotonic()
            outcome = await asyncio.wait_for(waiting, 30)
            answered_after = time.monotonic() - gone
        finally:
            await requests.close()
    row = json.loads(outcome.body)
    assert (
        outcome.status is OutcomeStatus.UNAVAILABLE
        and "ImportError: no module named x" in row["_ng_failure_message"]
    )
    assert answered_after < 5  # not the 30 s grace


async def test_a_run_past_its_deadline_is_lost_and_worded_as_collect_words_it(own_server: str) -> None:
    timeouts = replace(DEFAULT_TIMEOUTS, rollout=1.0, result_grace=0.5)
    agent = "pretend_agent"
    pretending = await pretend_agent(own_server, agent)
    try:
        async with bus.open_bus(own_server, name="test front") as connection:
            requests = await RolloutRequests.open(connection, timeouts=timeouts)
            try:
                outcome = await asyncio.wait_for(requests.run(agent, ROW), 30)
            finally:
                await requests.close()
    finally:
        await pretending.stop()
        await pretending.conn.close()
    row = json.loads(outcome.body)
    assert outcome.status is OutcomeStatus.LOST and row["_ng_failure_class"] == "deadline_exceeded"
    assert row["_ng_failure_message"] == bus.run.EXPIRED


class Replacing(GivenUp):
    """The front's own worker for every agent is being replaced, until `done`."""

    def __init__(self, why: dict[str, str]) -> None:
        super().__init__(why)
        self.done = False

    def replacing(self, agent: str) -> bool:
        return not self.done


async def test_a_run_for_an_agent_whose_worker_is_being_replaced_is_taken_and_waits(own_server: str) -> None:
    """No live worker, but the front's own process is replacing one: the request is queued
    (the replacement will take it), not answered 503; once the replacement is given up on,
    it is answered with the reason."""
    why: dict[str, str] = {}
    workers = Replacing(why)
    async with bus.open_bus(own_server, name="test front") as connection:
        requests = await RolloutRequests.open(connection, workers=workers)
        try:
            waiting = asyncio.create_task(requests.run("replaced_agent", ROW))
            await asyncio.sleep(2.5)
            assert not waiting.done() and requests.in_flight == 1
            why["replaced_agent"] = "the worker processes serving replaced_agent exited 5 times in a row"
            workers.done = True
            outcome = await asyncio.wait_for(waiting, 10)
        finally:
            await requests.close()
    assert outcome.status is OutcomeStatus.UNAVAILABLE
    assert "exited 5 times in a row" in json.loads(outcome.body)["_ng_failure_message"]
