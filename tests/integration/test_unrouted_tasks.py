"""A task published by hand, without the headers `gym-runner` sets, still gets its result kept:
no `Gym-Run` (or an invalid one) sends it to `gym.results.unrouted`, and tasks without
`Gym-Seq` are told apart by `Gym-Task` rather than dropped as duplicates of each other. Each
result matches the exported result envelope schema."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

import nats.errors
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from gymbus import bus, schemas
from gymbus.bus import Connection, TaskConsumer, subjects
from gymbus.bus.hosting import rollout_task_handler
from gymbus.functions.registry import AGENTS
from gymbus.schemas import RUN, TASK
from tests.conftest import WEATHER_AGENT

pytestmark = pytest.mark.timeout(60)

jsonschema = pytest.importorskip("jsonschema")
RESULT_ENVELOPE = jsonschema.Draft202012Validator(
    json.loads((schemas.SCHEMA_DIR / "result_envelope.schema.json").read_text())
)


@pytest.fixture
async def agent_worker(weather_functions: bus.ServiceHost, nc: Connection) -> AsyncIterator[TaskConsumer]:
    consumer = TaskConsumer(nc, WEATHER_AGENT, rollout_task_handler(nc, AGENTS[WEATHER_AGENT]))
    await consumer.start()
    yield consumer
    await consumer.stop()


async def _results(nc: Connection, run: str, tasks: set[str]) -> dict[str, dict[str, object]]:
    """The results on `gym.results.<run>` of the tasks numbered `tasks`, by `Gym-Task`."""
    js = nc.js
    name = f"test-{uuid.uuid4().hex[:8]}"
    config = ConsumerConfig(
        durable_name=name, filter_subject=subjects.results(run), deliver_policy=DeliverPolicy.ALL
    )
    pull = await js.pull_subscribe(
        subjects.results(run), durable=name, stream=subjects.RESULTS_STREAM, config=config
    )
    found: dict[str, dict[str, object]] = {}
    deadline = time.monotonic() + 45
    try:
        while not tasks <= set(found) and time.monotonic() < deadline:
            try:
                messages = await pull.fetch(10, timeout=1)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            for msg in messages:
                await msg.ack()
                task = (msg.headers or {}).get(TASK, "")
                if task in tasks:
                    assert task not in found, f"task {task} has two results"
                    found[task] = json.loads(msg.data)
                    envelope = {"subject": msg.subject, "headers": msg.headers, "body": found[task]}
                    RESULT_ENVELOPE.validate(envelope)
    finally:
        await pull.unsubscribe()
        await js.delete_consumer(subjects.RESULTS_STREAM, name)
    return found


async def test_results_of_tasks_without_a_run_or_seq_are_kept_and_told_apart(
    agent_worker: TaskConsumer, nc: Connection, weather_rows: list[bytes]
) -> None:
    js = nc.js
    subject = subjects.tasks(WEATHER_AGENT)
    before = agent_worker.unrouted
    # Two identical tasks with no headers at all, and one whose run is not a subject token.
    bare = [str((await js.publish(subject, weather_rows[0])).seq) for _ in range(2)]
    invalid = str((await js.publish(subject, weather_rows[1], headers={RUN: "not a token"})).seq)
    # A run of our own, but no Gym-Seq: both results must arrive.
    run = f"hand{uuid.uuid4().hex[:8]}"
    own = [str((await js.publish(subject, row, headers={RUN: run})).seq) for row in weather_rows[:2]]

    unrouted = await _results(nc, subjects.UNROUTED_RUN, {*bare, invalid})
    routed = await _results(nc, run, set(own))

    assert set(unrouted) == {*bare, invalid} and set(routed) == set(own)
    for row in [*unrouted.values(), *routed.values()]:
        assert isinstance(row["reward"], float) and row["response"] and "_ng_failure_class" not in row
    assert agent_worker.unrouted - before == 3
