"""Environments, agents and model adapters: plain async functions typed with `schemas`.

This is also what you import to write your own. An environment is a few async functions:

- tools, `async def name(args: ArgsStruct, session: Session) -> ResultStruct`, made into
  `Tool`s with `tool(fn)` (its name and argument struct come from the function);
- an optional seed, `async def seed(request: MySeedRequest, session: Session) -> None`,
  called once per rollout with the task row (`SeedRequest` subclassed with the row fields it
  reads);
- a verify, `async def verify(request: MyVerifyRequest, session: Session) -> VerifyResult`,
  given the row and the rollout's `response` (`VerifyRequest` subclassed likewise), whose
  `reward` is the rollout's reward.

`Environment(name=..., tools=..., seed=..., verify=..., agents=("my_env_simple_agent",))`
ties them together; each name in `agents` is an agent (NeMo Gym's `simple_agent` loop by
default) that datasets name in `agent_ref`. `Session.load`/`save` keep per-rollout state
(on the bus, any replica serves any call of a rollout); `Session.generate` calls a model
(a judge). An agent of your own is an `Agent` over an `AgentFunction`; a model adapter a
`Model` whose `make` builds a `ModelFunction`.

An environment's settings are a struct with defaults (`Environment.settings` names its
type), changed by the JSON object in the variable `GYMBUS_<NAME>`; its functions read them
with `settings(MySettings, "my_env")`.

Errors a tool may raise: `BadRequest` (the arguments make no sense) and `NotFound` (no such
thing, or a session that was never seeded) reach the model as the tool's output,
`{"error": "<message>"}`, and the rollout goes on. Any other exception is a bug: the model
reads `{"error": "<tool> raised <ExceptionType>; see the worker log"}` (never the message
or traceback, which go to the worker's log).

Your module's functions are found by `gym-runner serve path/to/my_env.py` (or
`my_pkg.my_env`), or by name once your package declares an entry point in the group
`gymbus.functions` (the commands look every name up in `gymbus.functions.registry`).
Nothing here imports `nats` or `bus`.
"""

from gymbus.schemas import (
    BadRequest,
    GymError,
    Item,
    NotFound,
    Response,
    ResponsesCreateParams,
    SeedRequest,
    VerifyRequest,
    VerifyResult,
)

from ._spec import (
    Agent,
    AgentFunction,
    AgentUnavailable,
    Calls,
    Environment,
    MemoryState,
    Model,
    ModelFunction,
    ModelOptions,
    Models,
    NoModels,
    Session,
    SessionState,
    TaskMetrics,
    Tool,
    settings,
    tool,
)

__all__ = [
    "Agent",
    "AgentFunction",
    "AgentUnavailable",
    "BadRequest",
    "Calls",
    "Environment",
    "GymError",
    "Item",
    "MemoryState",
    "Model",
    "ModelFunction",
    "ModelOptions",
    "Models",
    "NoModels",
    "NotFound",
    "Response",
    "ResponsesCreateParams",
    "SeedRequest",
    "Session",
    "SessionState",
    "TaskMetrics",
    "Tool",
    "VerifyRequest",
    "VerifyResult",
    "settings",
    "tool",
]
