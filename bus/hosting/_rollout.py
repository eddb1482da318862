"""One rollout as an agent worker runs it: its session and deadline, its calls over the
bus, and what is written when it fails.

A task from the queue (`rollout_task_handler`) or a direct request on
`gym.agent.<agent>.run` (`agent_service`) becomes `run_rollout`: the agent function runs
with `BusCalls`, which sends its seed, model, tool and verify calls as requests.

Every request carries the rollout's session id and deadline. Transient failures are
tried again with jittered backoff, and counted (they end up in the rollout's `_gymbus`
stats), but only where trying again is safe:

- model calls: on any transient failure (rate limit, 5xx, timeout, worker gone);
- seed and verify: on any transient failure (seeding overwrites, verifying changes nothing);
- tool calls: only when the request reached no worker at all, since a tool may have
  side effects (a counter incremented twice would corrupt the rollout). A tool call whose
  worker went silent mid-call (died, or froze) may or may not have run, so the session
  can no longer be trusted: `ToolCallLost` ends the attempt, and the rollout starts over
  from a fresh session (`run_rollout`) rather than show the model a bus failure.
  So does a call answered `SessionLost` (the process that held the session's state died:
  a hosted NeMo Gym server's replica), whatever the call: that state is gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from gymbus.functions import Agent, AgentUnavailable
from gymbus.schemas import (
    ATTEMPT,
    ATTEMPT_INDEX,
    CALL_RETRY,
    DEADLINE,
    DEFAULT_TIMEOUTS,
    DELIVERY,
    FAILURE_CLASS,
    MODEL_RETRY,
    RESPONSE,
    ROLLOUT_RESTART,
    SESSION,
    STATS,
    GymError,
    NoResponders,
    RequestTimeout,
    Response,
    ResponsesCreateParams,
    RolloutFailed,
    RolloutStats,
    SessionLost,
    TaskRow,
    Timeouts,
    UnknownTool,
    UpstreamFailed,
    deadline_of,
    failure_row,
    header_int,
    merge_row,
    row_fields,
    seconds_left,
)

from ..cluster import Connection
from ..wire import WorkerSilent, decode, encode, request, retrying, subjects
from ._services import Endpoint, ServiceSpec

__all__ = [
    "BusCalls",
    "BusModels",
    "RolloutHandler",
    "ToolCallLost",
    "agent_service",
    "rollout_task_handler",
    "run_rollout",
    "served_and_transient",
]

log = logging.getLogger("gymbus.rollout")

RolloutHandler = Callable[[bytes, Mapping[str, str]], Awaitable[bytes]]
"""`run(task row, task headers) -> rollout row`; never raises for a failed rollout."""


class ToolCallLost(Exception):
    """A call's worker (a tool's, a seed's, a verify's) went silent mid-call, or the session
    it worked on is gone: whether it ran is unknown, so the rollout starts over.

    Deliberately not a `GymError`: agents turn those into outputs the model reads, and
    this one must end the attempt instead."""


def _transient(error: GymError) -> bool:
    return error.transient


def _undelivered(error: GymError) -> bool:
    return isinstance(error, NoResponders)


def served_and_transient(error: GymError) -> bool:
    """Transient, but not for want of a model: a model nobody serves fails at once."""
    return error.transient and not isinstance(error, NoResponders)


class BusModels:
    """`Models` over the bus, carrying the session and deadline of the request being served.
    A failed call is retried (where `should_retry` says so) only while the wait ends before
    that deadline (a judge nobody serves fails the verification in time for the rollout to
    be written as a failure)."""

    def __init__(
        self,
        conn: Connection,
        headers: Mapping[str, str],
        timeouts: Timeouts,
        should_retry: Callable[[GymError], bool] = _transient,
        on_retry: Callable[[GymError], None] | None = None,
    ) -> None:
        self.conn = conn
        self.headers = {key: headers[key] for key in (SESSION, DEADLINE) if key in headers}
        self.deadline = deadline_of(headers)
        self.timeouts = timeouts
        self.should_retry = should_retry
        self.on_retry = on_retry

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        subject = subjects.model_responses(model)
        body = encode(params)

        async def once() -> Response:
            reply = await request(self.conn, subject, body, timeout=self.timeouts.model, headers=self.headers)
            return decode(reply, Response, "model response")

        return await retrying(
            once, MODEL_RETRY, should_retry=self.should_retry, deadline=self.deadline, on_retry=self.on_retry
        )


class BusCalls:
    """`Calls` over the bus for one rollout of `agent`; `stats` counts its retries."""

    def __init__(
        self, conn: Connection, agent: Agent, session: str, deadline: float, timeouts: Timeouts
    ) -> None:
        self.conn = conn
        self.agent = agent
        self.timeouts = timeouts
        self.deadline = deadline
        self.headers = {SESSION: session, DEADLINE: f"{deadline:.3f}"}
        self.stats = RolloutStats()
        self.models = BusModels(conn, self.headers, timeouts, on_retry=self._count_model)

    def _count_model(self, error: GymError) -> None:
        self.stats.model_retries += 1

    def _count_call(self, error: GymError) -> None:
        self.stats.call_retries += 1

    async def _call(
        self, subject: str, body: bytes, timeout: float, should_retry: Callable[[GymError], bool] = _transient
    ) -> bytes:
        async def once() -> bytes:
            try:
                return await request(self.conn, subject, body, timeout=timeout, headers=self.headers)
            except (SessionLost, WorkerSilent) as exc:  # whether it ran is unknown: start over
                raise ToolCallLost(f"{subject}: {exc.message}") from None

        return await retrying(
            once, CALL_RETRY, should_retry=should_retry, deadline=self.deadline, on_retry=self._count_call
        )

    async def seed(self, row: bytes) -> bytes:
        return await self._call(subjects.env_seed(self.agent.environment), row, self.timeouts.seed)

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response:
        return await self.models.generate(model or self.agent.model, params)

    async def tool(self, name: str, arguments: str) -> str:
        """The tool's output. Retried only while its environment is down: when the
        environment is up but has no such tool (models invent names), `UnknownTool` at once."""
        subject = subjects.env_tool(self.agent.environment, name)
        body = arguments.encode()

        async def once() -> bytes:
            try:
                return await request(
                    self.conn, subject, body, timeout=self.timeouts.tool, headers=self.headers
                )
            except NoResponders:
                if await self._environment_is_up():
                    raise UnknownTool(
                        f"environment {self.agent.environment} has no tool named {name!r}"
                    ) from None
                raise
            except WorkerSilent as exc:
                raise ToolCallLost(f"tool {name}: {exc.message}") from None
            except SessionLost as exc:
                raise ToolCallLost(f"tool {name}: {exc.message}") from None

        try:
            reply = await retrying(
                once, CALL_RETRY, should_retry=_undelivered, deadline=self.deadline, on_retry=self._count_call
            )
        except GymError as exc:
            # The agent named the tool; the model, which may read this error, has no use for a subject.
            exc.subject = None
            raise
        return reply.decode()

    async def _environment_is_up(self) -> bool:
        try:
            await request(
                self.conn, subjects.service_ping(self.agent.environment), b"", timeout=self.timeouts.ping
            )
        except (NoResponders, RequestTimeout):
            return False
        return True

    async def verify(self, row: bytes, response: Response | msgspec.Raw) -> bytes:
        body = merge_row(row, response=response)
        return await self._call(subjects.env_verify(self.agent.environment), body, self.timeouts.verify)


async def run_rollout(
    conn: Connection,
    agent: Agent,
    row: bytes,
    deadline: float,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    *,
    attempt: int = 0,
    delivery: int = 1,
) -> bytes:
    """One rollout of `row` by `agent`: a rewarded rollout row, or a failure row. Raises only
    `AgentUnavailable` (the agent cannot run here any more: the rollout belongs elsewhere).

    Each run gets a fresh session, so a task redelivered after a worker died starts from a
    clean seed rather than from the dead attempt's half-changed state; for the same reason a
    rollout whose tool call was lost (`ToolCallLost`) starts over in-process, up to
    `ROLLOUT_RESTART.attempts` times (counted in `restarts`). The row carries how it ran
    under `_gymbus` (attempt, delivery, retries) and, from the second attempt on, NeMo Gym's
    `_ng_attempt_index`.
    """
    stats = RolloutStats(attempt=attempt, delivery=delivery)
    stamps: dict[str, Any] = {STATS: stats, **({ATTEMPT_INDEX: attempt} if attempt else {})}
    try:
        async with asyncio.timeout(max(0.0, deadline - time.time())):
            result = await _restarting(conn, agent, row, deadline, timeouts, stats)
        _check_rollout(agent, result)
        return merge_row(result, **stamps)
    except AgentUnavailable:
        raise  # not this rollout's failure: its task goes to another worker
    except RolloutFailed as exc:
        return failure_row(row, exc.failure_class, exc.message, **stamps)
    except TimeoutError:
        return failure_row(
            row, "deadline_exceeded", "the rollout did not finish before its deadline", **stamps
        )
    except GymError as exc:
        return failure_row(row, "agent_failed", str(exc), **stamps)
    except Exception as exc:  # an agent bug must cost one rollout, not the worker
        log.exception("agent %s failed", agent.name)
        message = f"{agent.name} raised {type(exc).__name__}; see the worker log"
        return failure_row(row, "agent_failed", message, **stamps)


def _check_rollout(agent: Agent, result: bytes) -> None:
    """`RolloutFailed` unless what `agent` returned is a rollout row (it has `response`) or a
    failure row of its own: a row without the response would be written, and trained on, as
    a success, though no verify of it can run again."""
    try:
        fields = row_fields(result)
    except (msgspec.DecodeError, RecursionError):
        raise RolloutFailed("agent_failed", f"agent {agent.name} returned no JSON object") from None
    if RESPONSE not in fields and FAILURE_CLASS not in fields:
        raise RolloutFailed(
            "agent_failed",
            f"agent {agent.name} returned a row without `{RESPONSE}` (fields: {', '.join(sorted(fields))}): "
            "an agent returns the task row with the model's response and the verdict set on it "
            "(merge_row(row, verdict, response=response))",
        )


async def _restarting(
    conn: Connection, agent: Agent, row: bytes, deadline: float, timeouts: Timeouts, stats: RolloutStats
) -> bytes:
    for restart in range(ROLLOUT_RESTART.attempts):
        calls = BusCalls(conn, agent, session=uuid.uuid4().hex, deadline=deadline, timeouts=timeouts)
        calls.stats = stats
        try:
            return await agent.rollout(row, calls, agent.max_steps)
        except ToolCallLost as exc:
            wait = ROLLOUT_RESTART.delay(restart)
            if restart + 1 >= ROLLOUT_RESTART.attempts or time.time() + wait >= deadline:
                raise RolloutFailed("tool_failed", f"{exc}; tried {restart + 1} times") from None
            stats.restarts += 1
            log.warning("rollout of %s starts over: %s", agent.name, exc)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def rollout_task_handler(
    conn: Connection, agent: Agent, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> RolloutHandler:
    """How an agent worker runs a task from the queue (deadline and attempt from its headers)."""

    async def handle(row: bytes, headers: Mapping[str, str]) -> bytes:
        left = seconds_left(headers)
        deadline = time.time() + (timeouts.rollout if left is None else left)
        attempt, delivery = header_int(headers, ATTEMPT, 0), header_int(headers, DELIVERY, 1)
        return await run_rollout(conn, agent, row, deadline, timeouts, attempt=attempt, delivery=delivery)

    return handle


def agent_service(conn: Connection, agent: Agent, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> ServiceSpec:
    """The agent's direct subject `gym.agent.<agent>.run`: a task row in, its rollout out."""

    async def run(data: bytes, headers: Mapping[str, str]) -> bytes:
        decode(data, TaskRow, "task row")  # a bad row is a bad request, not a rollout
        left = seconds_left(headers)
        deadline = time.time() + (timeouts.agent_run if left is None else left)
        try:
            return await run_rollout(conn, agent, data, deadline, timeouts)
        except AgentUnavailable as exc:
            raise UpstreamFailed(f"{exc}: ask again (another worker may serve {agent.name})") from None

    endpoint = Endpoint("run", subjects.agent_run(agent.name), run)
    metadata = {"environment": agent.environment, "model": agent.model}
    return ServiceSpec(agent.name, "agent", (endpoint,), agent.description, metadata)
