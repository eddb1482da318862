"""`example_session_state_mgmt`: NeMo Gym's stateful counter, with its state on the bus.

Seeding a session sets its counter to the row's `initial_count`; the tools change and
read it:

- `increment_counter {count}` → `{"success": true}`: adds `count` to the counter
- `get_counter_value {}` → `{"count": <the counter>}`

Reward: 1.0 iff the session's counter equals the row's `expected_count` at verification,
else 0.0. A session that holds no counter (never seeded, expired, or the fresh session
`gym-runner verify` re-scores a stored rollout with) has its counter rebuilt from the
rollout instead: the row's `initial_count`, plus the `count` of each `increment_counter`
call in `response.output` whose `function_call_output` reports success, in order. A call
the tool refused (bad arguments, a session it did not know) changed nothing, so it counts
for nothing. A live counter always wins over the replay. A session with no counter and a
row without an integer `initial_count` verifies to 0.0 with `error_type: unknown_session`.

The counter lives in the session's KV entry (`Session.load`/`save`), not in the worker's
memory as in NeMo Gym, so any replica can serve any call of a rollout and a killed
worker loses nothing. Seeding is idempotent: a session that already has a counter keeps
it. Two deliberate differences from NeMo Gym, which silently starts an unknown
session's counter at 0: a tool called for a session that was never seeded or has
expired answers the model with an error (`NotFound`), and a row without an integer
`initial_count` fails to seed (`BadRequest`). A row whose `expected_count` is missing or
not an integer verifies to 0.0 with an `error_type`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from gymbus.schemas import Item, NotFound, SeedRequest, VerifyRequest, VerifyResult

from .._spec import Environment, Session, tool


class Counter(Struct, kw_only=True):
    """A session's stored state."""

    count: int


class CounterSeedRequest(SeedRequest, kw_only=True):
    initial_count: int


class IncrementCounter(Struct, kw_only=True):
    count: int


class NoArguments(Struct, kw_only=True):
    pass


class Incremented(Struct, kw_only=True):
    success: bool


class CounterVerifyRequest(VerifyRequest, kw_only=True):
    # Typed loosely so a wrong-typed row is reward 0 with a reason, not a rejected request.
    expected_count: Any = UNSET
    initial_count: Any = UNSET


class CounterVerdict(VerifyResult, kw_only=True):
    error_type: str | UnsetType = UNSET


async def seed(request: CounterSeedRequest, session: Session) -> None:
    """Start the session's counter at `initial_count`, unless it already has one."""
    if await session.load(Counter) is None:
        await session.save(Counter(count=request.initial_count))


async def counter_of(session: Session) -> Counter:
    """The session's counter, or `NotFound` (the model reads it as the tool's output)."""
    counter = await session.load(Counter)
    if counter is None:
        raise NotFound(f"session {session.id!r} has no counter: it was never seeded, or it expired")
    return counter


def incremented(counter: Counter, args: IncrementCounter) -> Counter:
    """`counter` after `increment_counter(args)`: the tool and the replay both step with this."""
    return Counter(count=counter.count + args.count)


async def increment_counter(args: IncrementCounter, session: Session) -> Incremented:
    """Add `args.count` to the session's counter."""
    counter = await counter_of(session)
    await session.save(incremented(counter, args))
    return Incremented(success=True)


async def get_counter_value(args: NoArguments, session: Session) -> Counter:
    """The session's counter."""
    return await counter_of(session)


def _decoded(decoder: msgspec.json.Decoder[Any], text: object) -> Any:
    """`text` decoded, or `None` when it is not a string of the decoder's type."""
    if not isinstance(text, str):
        return None
    try:
        return decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


_ARGUMENTS = msgspec.json.Decoder(IncrementCounter)
_ANSWER = msgspec.json.Decoder(Incremented)


def replayed(initial_count: int, output: list[Item]) -> Counter:
    """The counter a rollout left behind: `initial_count`, stepped by each `increment_counter`
    call whose output reports success, in the order the outputs came back."""
    counter = Counter(count=initial_count)
    pending: dict[str, IncrementCounter] = {}  # calls awaiting their output, by call id
    for item in output:
        if item.kind == "function_call" and item.name == "increment_counter":
            args = _decoded(_ARGUMENTS, item.arguments)
            if args is not None and isinstance(item.call_id, str):
                pending[item.call_id] = args
        elif item.kind == "function_call_output" and isinstance(item.call_id, str):
            args = pending.pop(item.call_id, None)
            answer = _decoded(_ANSWER, item.output)
            if args is not None and answer is not None and answer.success:
                counter = incremented(counter, args)
    return counter


async def final_counter(request: CounterVerifyRequest, session: Session) -> Counter | None:
    """The session's counter; without one, the rollout's replay; `None` if neither exists."""
    counter = await session.load(Counter)
    if counter is not None:
        return counter
    start = request.initial_count
    if isinstance(start, bool) or not isinstance(start, int):
        return None
    return replayed(start, request.response.output)


async def verify(request: CounterVerifyRequest, session: Session) -> CounterVerdict:
    """Reward 1.0 iff the final counter (the session's, else the replay's) equals `expected_count`."""
    expected = request.expected_count
    if isinstance(expected, bool) or not isinstance(expected, int):
        error = "missing_expected_count" if expected is UNSET else "invalid_expected_count"
        return CounterVerdict(reward=0.0, error_type=error)
    counter = await final_counter(request, session)
    if counter is None:
        return CounterVerdict(reward=0.0, error_type="unknown_session")
    return CounterVerdict(reward=float(counter.count == expected))


ENVIRONMENT = Environment(
    name="example_session_state_mgmt",
    tools=(tool(increment_counter), tool(get_counter_value)),
    verify=verify,
    verify_request=CounterVerifyRequest,
    seed=seed,
    seed_request=CounterSeedRequest,
    agents=("example_session_state_mgmt_simple_agent",),
    description="NeMo Gym's stateful counter, kept in the session's KV entry: seed, increment, get.",
)
