"""What a function is: an environment, an agent or a model, described by plain data.

A function's code is a plain `async def` typed with msgspec structs; these specs say
which subject each one serves and which structs its requests decode into. Nothing here
knows about NATS: `bus` hosts them as services.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, get_type_hints

import msgspec

from gymbus.schemas import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    NotFound,
    Response,
    ResponsesCreateParams,
    SeedRequest,
    VerifyRequest,
    VerifyResult,
)

__all__ = [
    "Agent",
    "AgentFunction",
    "AgentUnavailable",
    "Calls",
    "Environment",
    "MemoryState",
    "Model",
    "ModelFunction",
    "ModelOptions",
    "Models",
    "NoModels",
    "Session",
    "SessionState",
    "TaskMetrics",
    "Tool",
    "settings",
    "tool",
]

S = TypeVar("S", bound=msgspec.Struct)


class SessionState(Protocol):
    """Per-session state storage (a JetStream KV bucket on the bus; a dict in tests)."""

    async def get(self, session_id: str) -> bytes | None: ...

    async def put(self, session_id: str, value: bytes) -> None: ...


class MemoryState:
    """`SessionState` in a dict: for unit tests and single-process use."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def get(self, session_id: str) -> bytes | None:
        return self.values.get(session_id)

    async def put(self, session_id: str, value: bytes) -> None:
        self.values[session_id] = value


class Models(Protocol):
    """Model calls an environment makes itself (an LLM judge, a user simulator)."""

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response: ...


class NoModels:
    """`Models` of a session that may call none (unit tests of environments without a judge)."""

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        raise NotFound(f"this session cannot call models (asked for {model!r})")


@dataclass
class Session:
    """What an environment function knows of the rollout it serves: the session id,
    typed access to the session's stored state, model calls (for judges), and the
    caller's deadline.

    Every tool, seed and verify function takes it as its second argument. State lives
    on the bus (a KV bucket) in workers, so any replica can serve any call of a rollout.
    """

    id: str
    state: SessionState = field(default_factory=MemoryState)
    models: Models = field(default_factory=NoModels)
    deadline: float | None = None
    """Unix time (seconds) after which nobody waits for this call's result (the
    request's `Gym-Deadline`); `None` if the caller set none. Work past it is wasted."""

    async def load(self, kind: type[S]) -> S | None:
        """This session's state as `kind`, or `None` if none was saved (or it expired)."""
        data = await self.state.get(self.id)
        return None if data is None else msgspec.json.decode(data, type=kind)

    async def save(self, value: msgspec.Struct) -> None:
        await self.state.put(self.id, msgspec.json.encode(value))

    async def generate(self, model: str, params: ResponsesCreateParams) -> Response:
        """One generation by the model served as `model` (e.g. a judge), for this rollout."""
        return await self.models.generate(model, params)


@dataclass(frozen=True)
class Tool:
    """One tool of an environment: `fn(args, session)` with `args` decoded as `args_type`."""

    name: str
    fn: Callable[[Any, Session], Awaitable[Any]]
    args_type: type


def tool(fn: Callable[[S, Session], Awaitable[Any]]) -> Tool:
    """A `Tool` named after `fn`, whose arguments struct is its first parameter's type."""
    first = next(iter(inspect.signature(fn).parameters))
    return Tool(name=fn.__name__, fn=fn, args_type=get_type_hints(fn)[first])


@dataclass(frozen=True)
class TaskMetrics:
    """An environment's own aggregate metrics (NeMo Gym's `compute_metrics` and
    `get_key_metrics`), computed over the rollouts of each task.

    `project` turns one successful rollout row (its top-level fields, still encoded) into
    the little the metrics need (a few scores, a digest of the answer), so the runner keeps
    that per rollout and never the row. `compute` gets those projections grouped by task
    (ordered by `_ng_task_index`, each group by `_ng_rollout_index`) and returns metrics
    that join the agent's `agent_metrics`. `per_task`, if given, gives one task's entry of
    `group_level_metrics`. `key_metrics` picks the headline metrics from all agent metrics
    (default: every `mean/*`, as NeMo Gym).
    """

    project: Callable[[Mapping[str, msgspec.Raw]], Any]
    compute: Callable[[list[list[Any]]], dict[str, Any]]
    per_task: Callable[[list[Any]], dict[str, Any]] | None = None
    key_metrics: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Environment:
    """Tools, optional session set-up, and verification.

    `agents` are the agent names datasets use for this environment (`agent_ref.name`,
    e.g. `mcqa_simple_agent`); each is an agent of kind `agent_kind` driving this
    environment for at most `max_steps` model calls per rollout. `metrics`, if given,
    adds the environment's own aggregate metrics to the runner's (pass@k, say).
    `startup`, if given, is called once by each worker before it serves the
    environment (in a thread, before the worker says it is ready), to check and log what
    the host provides (code_gen's sandbox) and to import what its calls need: a heavy
    import on a worker's first call would stall every call that worker serves.
    `cpu_bound` says its calls hold the CPU in Python for long (see the field).
    `settings`, if given, is the type of its settings (see the field).
    `re_verifiable=False` says its verify cannot judge a stored rollout (see the field).
    """

    name: str
    verify: Callable[[Any, Session], Awaitable[VerifyResult]]
    verify_request: type[VerifyRequest] = VerifyRequest
    tools: tuple[Tool, ...] = ()
    seed: Callable[[Any, Session], Awaitable[None]] | None = None
    seed_request: type[SeedRequest] = SeedRequest
    agents: tuple[str, ...] = ()
    agent_kind: str = "simple_agent"
    max_steps: int = DEFAULT_LIMITS.max_steps
    description: str = ""
    metrics: TaskMetrics | None = None
    startup: Callable[[], None] | None = None
    cpu_bound: bool = False
    """Its seed, verify and tool calls compute in Python for long (a scorer, a parser, a
    first import): the worker runs each in a thread of its own (with its own event loop;
    `Session` calls go back to the worker's loop), never on the loop that answers the bus.
    A loop held for a few seconds misses the server's pings and loses the connection, and
    with it every call the worker was serving. Threads, not processes: a call keeps its
    `Session` (state, judges) and takes any argument, and Python hands the interpreter to
    the loop every few milliseconds. Work that may hang inside C code, or that should use
    more than one core, belongs in child processes the function starts and kills itself
    (math_with_judge's math-verify, code_gen's sandbox); such a function is not
    `cpu_bound`."""
    settings: type[msgspec.Struct] | None = None
    """The type of its settings (a `msgspec.Struct` with defaults, `forbid_unknown_fields`),
    read from the variable `GYMBUS_<NAME>` as a JSON object (`environments._settings`). Named
    here, a bad variable is refused before the first rollout (`check_settings`), not by every
    verify after the model calls were paid."""
    re_verifiable: bool = True
    """Whether its verify gives a stored rollout (its row and `response`, in a fresh
    session) the reward the rollout got. `False` for a verify that needs the rollout's own
    session (a sandbox the rollout left, say): `gym-runner verify` then reports its rows as
    not re-verifiable, rather than re-scoring them into disagreements that are not."""

    def check_settings(self) -> None:
        """`BadRequest` naming the variable if it does not hold this environment's settings."""
        if self.settings is not None:
            settings(self.settings, self.name)


def settings(kind: type[S], environment: str) -> S:
    """`environment`'s settings as `kind` (a struct with a default for each): its defaults,
    changed by the JSON object in the variable `GYMBUS_<ENVIRONMENT>`; `BadRequest` naming
    the variable if it holds no such object. What an environment's functions call to read
    their settings."""
    from .environments._settings import settings as read  # noqa: PLC0415 - imported on first use

    return read(kind, environment)


class Calls(Protocol):
    """What an agent may call during one rollout; bound to its session, environment and model.

    `model` calls the agent's policy model, or the model served as `model` if given (a
    user simulator, say). `seed` returns the environment's reply (a hosted NeMo Gym
    server's own; `{}` for most). `verify` takes the response as a struct, or as the JSON
    an agent made (a hosted NeMo Gym agent's, with fields of its own). `tool` raises a
    `GymError` when the tool fails; the other calls raise it when the rollout cannot go on.
    """

    async def seed(self, row: bytes) -> bytes: ...

    async def model(self, params: ResponsesCreateParams, model: str | None = None) -> Response: ...

    async def tool(self, name: str, arguments: str) -> str: ...

    async def verify(self, row: bytes, response: Response | msgspec.Raw) -> bytes: ...


AgentFunction = Callable[[bytes, Calls, int], Awaitable[bytes]]
"""`run(row, calls, max_steps) -> rollout row`: rows are JSON objects (bytes)."""


class AgentUnavailable(Exception):
    """The agent can run no rollout in this worker any more (the process that runs it
    died): the rollout goes back to the queue for another worker, rather than end as a
    failure row. Deliberately not a `GymError`: it never goes on the wire as one."""


@dataclass(frozen=True)
class Agent:
    """An agent: its code and the environment and model it drives."""

    name: str
    rollout: AgentFunction
    """The agent itself: one rollout of a task row."""
    environment: str
    model: str = "policy"
    max_steps: int = DEFAULT_LIMITS.max_steps
    description: str = ""
    other_models: tuple[str, ...] = ()
    """Models it calls besides `model`, by served name (a user simulator, say)."""


ModelFunction = Callable[[ResponsesCreateParams], Awaitable[Response]]
"""One generation: Responses API request in, response out."""


@dataclass(frozen=True)
class ModelOptions:
    """Where a model adapter sends its requests. The key never appears in logs or repr."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    api: str = "responses"
    """`responses` (the Responses API) or `chat` (Chat Completions) for the `openai` adapter;
    `vllm` picks the `vllm` model function (Chat Completions with token capture) instead."""
    max_retries: int = 0
    """Retries inside the SDK; 0 because agents retry transient model failures themselves."""
    timeout: float = DEFAULT_TIMEOUTS.model
    max_connections: int = DEFAULT_LIMITS.model_connections
    token_capture: bool = True
    """`vllm` only: put each call's prompt and generated token ids and logprobs on its last
    output item, for training."""
    policy_versions: Callable[[str], tuple[str, int] | None] | None = field(
        default=None, repr=False, compare=False
    )
    """The current version of a policy under training, by its key (`schemas._policy`), as
    `(adapter name, version)`, or `None` while it has none: set by the worker hosting a
    model that follows policies (from the bus). The `vllm` function names that adapter in
    each request whose metadata names the policy."""

    @property
    def servers(self) -> list[str]:
        """The server URLs in `base_url` (several comma-separated), without trailing slashes."""
        return [url.strip().rstrip("/") for url in (self.base_url or "").split(",") if url.strip()]


@dataclass(frozen=True)
class Model:
    """A model adapter: `make(options)` builds the generation function it serves. A worker
    calls it once, in a thread (it may import an SDK for seconds), so it must not need a
    running event loop: make clients that bind to one on first use."""

    name: str
    make: Callable[[ModelOptions], ModelFunction]
    description: str = ""
    follows_policies: bool = False
    """Whether it serves adapters of a policy under training (its host then keeps
    `ModelOptions.policy_versions` current)."""
