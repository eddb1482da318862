"""NeMo Gym's `example_session_state_mgmt` resources server, ported to GymBus functions.

Each piece of NeMo Gym's `app.py` has its counterpart here (see docs/porting.md):

- the pydantic request and response models are msgspec structs, the row's models subclass
  `SeedRequest` and `VerifyRequest`;
- `seed_session`, each tool route and `verify` are plain async functions taking
  `(body, session)`, registered by `Environment` instead of `setup_webserver`;
- `self.session_id_to_counter[session_id]` (the server's memory, keyed by the session
  cookie) is `session.load(Counter)` / `session.save(...)` (the bus's key-value store, keyed
  by the rollout's session id: any replica serves any call);
- the agent config's `simple_agent` is the name in `agents`.

The rows stay NeMo Gym's; only the agent they name changes (`--agent
stateful_counter_simple_agent`). The rewards stay NeMo Gym's: tests/integration/test_porting.py
collects the same rows from both and compares them.

    gym-runner serve examples/porting/stateful_counter.py offline
"""

from __future__ import annotations

from msgspec import Struct

from gymbus.functions import Environment, SeedRequest, Session, VerifyRequest, VerifyResult, tool


class Counter(Struct, kw_only=True):
    """What NeMo Gym's `session_id_to_counter[session_id]` held."""

    count: int


class IncrementCounterRequest(Struct, kw_only=True):
    count: int


class IncrementCounterResponse(Struct, kw_only=True):
    success: bool


class GetCounterValueRequest(Struct, kw_only=True):
    """No arguments (NeMo Gym's route takes no body)."""


class GetCounterValueResponse(Struct, kw_only=True):
    count: int


class StatefulCounterSeedSessionRequest(SeedRequest, kw_only=True):
    initial_count: int


class StatefulCounterVerifyRequest(VerifyRequest, kw_only=True):
    expected_count: int


async def seed(body: StatefulCounterSeedSessionRequest, session: Session) -> None:
    """`session_id_to_counter.setdefault(session_id, body.initial_count)`."""
    if await session.load(Counter) is None:
        await session.save(Counter(count=body.initial_count))


async def _counter(session: Session) -> int:
    """`session_id_to_counter.setdefault(session_id, 0)`."""
    counter = await session.load(Counter)
    if counter is None:
        counter = Counter(count=0)
        await session.save(counter)
    return counter.count


async def increment_counter(body: IncrementCounterRequest, session: Session) -> IncrementCounterResponse:
    await session.save(Counter(count=await _counter(session) + body.count))
    return IncrementCounterResponse(success=True)


async def get_counter_value(body: GetCounterValueRequest, session: Session) -> GetCounterValueResponse:
    return GetCounterValueResponse(count=await _counter(session))


async def verify(body: StatefulCounterVerifyRequest, session: Session) -> VerifyResult:
    """1.0 iff the session's counter equals `expected_count`; 0.0 for a session with none."""
    counter = await session.load(Counter)
    reward = 0.0 if counter is None else float(body.expected_count == counter.count)
    return VerifyResult(reward=reward)


ENVIRONMENT = Environment(
    name="stateful_counter",
    tools=(tool(increment_counter), tool(get_counter_value)),
    seed=seed,
    seed_request=StatefulCounterSeedSessionRequest,
    verify=verify,
    verify_request=StatefulCounterVerifyRequest,
    agents=("stateful_counter_simple_agent",),
    description="NeMo Gym's example_session_state_mgmt, ported: a counter per session.",
)
