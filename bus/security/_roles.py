"""Roles on a shared bus, each with only the subjects it needs, and the nats-server
configuration that enforces them.

| role                | may                                                                      |
| ------------------- | ------------------------------------------------------------------------ |
| `runner`            | publish tasks; read results (its runs'); request verifiers and agents    |
| `producer`          | publish tasks only                                                       |
| `agent-<agent>`     | take its agent's tasks; call its environment and models; publish results |
| `env-<env>`         | serve `gym.env.<env>.>`; keep its own sessions; call the named models    |
| `model-<model>`     | serve `gym.model.<model>.responses`                                      |
| `nemo-gym-<server>` | a hosted NeMo Gym server: its environment and the agents its config declares |
| `monitor`           | the Services API (`$SRV`) and the task queues' depth                     |
| `admin`             | an operator's: all of JetStream (purge or delete any stream)             |
| `worker`            | every worker subject (the embedded server's all-in-one worker processes) |
| `adapters`          | `gym-runner sync-adapters`: read policy records and adapters, report     |

A trainer (the `runner` role) writes policy records and adapter objects; model workers
read the records (the current version of each policy); a server's syncer reads both and
writes its own report, which the trainer reads.

Only agents (and the embedded all-in-one worker) may publish to `gym.results.>`. Beyond its
role's subjects, each identity (its nkey's public key, or user name) gets:

- its own inbox, `_INBOX.<identity>.>`, to read (see `bus.security._auth.inbox_prefix_for`), so no
  role reads another's replies;
- no publish to other inboxes: a serving role answers a request it received, within
  `allow_responses` (any number of replies, keep-alives included, for its longest call plus
  `Timeouts.late_reply`), and nothing else;
- claim checks (`bus.wire._claim_checks`): write its own bodies (`gym.claims.*.<identity>.>`) and
  read and release those addressed to its identity or its role (`gym.claims.<role>.>`).

JetStream's API is granted per stream and consumer, so a producer cannot open a consumer
on the results; no role but `admin` may purge the claim store or create a consumer on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gymbus.functions.registry import AGENTS
from gymbus.schemas import DEFAULT_TIMEOUTS

from ..wire import (
    ADAPTER_SERVERS_BUCKET,
    ADAPTERS_BUCKET,
    POLICIES_BUCKET,
    RUNS_BUCKET,
    SESSIONS_BUCKET,
    subjects,
)

__all__ = [
    "Role",
    "adapters_role",
    "admin_role",
    "agent_role",
    "combined_role",
    "environment_role",
    "hosted_server_role",
    "model_role",
    "monitor_role",
    "producer_role",
    "runner_role",
    "server_authorization",
    "worker_role",
]

_API = "$JS.API"
_T = DEFAULT_TIMEOUTS


@dataclass(frozen=True)
class Role:
    """What one kind of process may publish and subscribe to (its identity's own subjects
    aside: see `permissions`)."""

    name: str
    description: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    receives: tuple[str, ...] = ()
    """Claim receivers besides its identity whose bodies it reads: its role name (the
    receiver of requests on the subjects it serves, `bus.wire._subjects.receiver_of`)."""
    answers_within: float = 0.0
    """Seconds after a request arrives that it may still answer it (`allow_responses`);
    0: it serves no requests."""
    claims: bool = True
    """Whether it sends or receives bodies by claim check."""

    def permissions(self, identity: str) -> dict[str, Any]:
        """nats-server permissions of one user of this role whose identity (nkey public key,
        or user name) is `identity`."""
        inbox = f"_INBOX.{identity}.>"
        publish = [*self.publish, inbox]  # its own inbox: `check_permitted` echoes through it
        if self.claims:
            publish.append(subjects.claims_from(identity))
            for receiver in dict.fromkeys((*self.receives, identity)):
                publish += [subjects.claim_reads(subjects.claims_to(receiver)), subjects.claims_to(receiver)]
        permissions: dict[str, Any] = {
            "publish": {"allow": publish},
            "subscribe": {"allow": [inbox, *self.subscribe]},
        }
        if self.answers_within:
            permissions["allow_responses"] = {"max": -1, "expires": f"{self.answers_within:.0f}s"}
        return permissions


def combined_role(name: str, description: str, *roles: Role) -> Role:
    """One role allowed what each of `roles` is (a process that hosts several functions)."""
    return Role(
        name,
        description,
        tuple(dict.fromkeys(s for role in roles for s in role.publish)),
        tuple(dict.fromkeys(s for role in roles for s in role.subscribe)),
        tuple(dict.fromkeys(r for role in roles for r in role.receives)),
        max(role.answers_within for role in roles),
        any(role.claims for role in roles),
    )


def _stream_admin(stream: str) -> list[str]:
    """Create the stream if missing, bring it to the config, read its info."""
    return [f"{_API}.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")]


def _consumer(stream: str, consumer: str, *, delete: bool = False) -> list[str]:
    """Create, read and pull from one consumer (`*`: any) and acknowledge its messages."""
    verbs = ["INFO", "MSG.NEXT", "DURABLE.CREATE", *(["DELETE"] if delete else [])]
    return [
        *(f"{_API}.CONSUMER.{verb}.{stream}.{consumer}" for verb in verbs),
        f"{_API}.CONSUMER.CREATE.{stream}.{consumer}",
        f"{_API}.CONSUMER.CREATE.{stream}.{consumer}.>",
        f"$JS.ACK.{stream}.{consumer}.>",
        f"$JS.ACK.*.*.{stream}.{consumer}.>",  # the ack subject's newer form (with a domain)
    ]


def _kv(bucket: str, prefix: str = ">") -> list[str]:
    """Write keys under `prefix` of a KV bucket, and read them (direct get)."""
    stream = f"KV_{bucket}"
    return [
        f"{_API}.STREAM.INFO.{stream}",
        f"{_API}.STREAM.CREATE.{stream}",
        f"$KV.{bucket}.{prefix}",
        f"{_API}.DIRECT.GET.{stream}.$KV.{bucket}.{prefix}",
    ]


def _claim_store() -> list[str]:
    """Create the claim store if missing (bounded: `bus.wire._claim_checks`) and read its config.
    Creating cannot loosen a store that exists: the server refuses another config."""
    return [f"{_API}.STREAM.{verb}.{subjects.CLAIMS_STREAM}" for verb in ("INFO", "CREATE")]


def _object_store(bucket: str, *, write: bool = True) -> list[str]:
    """Get objects of an object store (its chunks through an ordered consumer), and with
    `write` put and delete them."""
    stream = f"OBJ_{bucket}"
    reading = [
        # nats-py finds the stream of an object's chunks by its subject before reading them.
        f"{_API}.STREAM.NAMES",
        *_stream_admin(stream),
        f"{_API}.STREAM.MSG.GET.{stream}",
        f"{_API}.DIRECT.GET.{stream}.>",
        f"{_API}.CONSUMER.CREATE.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}.>",
        f"{_API}.CONSUMER.INFO.{stream}.>",
        f"{_API}.CONSUMER.DELETE.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]
    return [*reading, f"{_API}.STREAM.PURGE.{stream}", f"$O.{bucket}.>"] if write else reading


def _kv_follow(bucket: str) -> list[str]:
    """Follow a KV bucket: a watch (an ordered consumer) of its keys."""
    stream = f"KV_{bucket}"
    return [
        f"{_API}.STREAM.INFO.{stream}",
        f"{_API}.STREAM.CREATE.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}.>",
        f"{_API}.CONSUMER.INFO.{stream}.>",
        f"{_API}.CONSUMER.DELETE.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _policies_read() -> list[str]:
    """What a model worker needs of the policies under training: their current versions."""
    return _kv_follow(POLICIES_BUCKET)


def _service(name: str) -> list[str]:
    """The Services API subjects of a service called `name` (PING, INFO, STATS)."""
    return ["$SRV.PING", "$SRV.INFO", "$SRV.STATS", f"$SRV.*.{name}", f"$SRV.*.{name}.*"]


def runner_role() -> Role:
    return Role(
        "runner",
        "gym-runner collect/verify/status, a trainer's rollout function: publish tasks, read results",
        publish=(
            subjects.tasks_all(),
            "gym.env.*.verify",
            "gym.agent.*.run",
            "$SRV.>",
            f"{_API}.INFO",
            *_stream_admin(subjects.TASKS_STREAM),
            *_stream_admin(subjects.RESULTS_STREAM),
            f"{_API}.STREAM.PURGE.{subjects.RESULTS_STREAM}",
            f"{_API}.CONSUMER.LIST.{subjects.TASKS_STREAM}",
            # A task whose deliveries ran out is read, written as a failure, and deleted.
            f"{_API}.STREAM.MSG.GET.{subjects.TASKS_STREAM}",
            f"{_API}.STREAM.MSG.DELETE.{subjects.TASKS_STREAM}",
            *_consumer(subjects.RESULTS_STREAM, "*", delete=True),
            *_kv(RUNS_BUCKET),
            *_claim_store(),
            # A trainer publishes its policy's versions and follows its servers' reports.
            *_kv(POLICIES_BUCKET),
            f"{_API}.STREAM.UPDATE.KV_{POLICIES_BUCKET}",
            *_object_store(ADAPTERS_BUCKET),
            *_kv_follow(ADAPTER_SERVERS_BUCKET),
        ),
        subscribe=(subjects.max_deliveries(subjects.TASKS_STREAM),),
        receives=("runner",),
    )


def producer_role() -> Role:
    return Role(
        "producer",
        "publishes rollout tasks only; cannot read results",
        publish=(subjects.tasks_all(), f"{_API}.STREAM.INFO.{subjects.TASKS_STREAM}"),
        subscribe=(),
    )


def monitor_role() -> Role:
    return Role(
        "monitor",
        "gym-runner status: the live functions and the task queues' depth",
        publish=(
            "$SRV.>",
            f"{_API}.INFO",
            f"{_API}.STREAM.INFO.{subjects.TASKS_STREAM}",
            f"{_API}.CONSUMER.LIST.{subjects.TASKS_STREAM}",
        ),
        subscribe=(),
        claims=False,
    )


def admin_role() -> Role:
    """An operator's key, for what no process of GymBus does: purging or deleting a stream
    (the claim store included), or making the claim store with another bound. Keep it off
    the machines that run workers."""
    return Role(
        "admin",
        "an operator's: all of JetStream's API (purge or delete any stream) and the Services API",
        publish=(f"{_API}.>", "$SRV.>"),
        subscribe=(),
        claims=False,
    )


def agent_role(agent: str, environment: str | None = None, models: Iterable[str] | None = None) -> Role:
    """An agent worker: its task queue, its environment and models, and the results. A
    GymBus agent's environment and models are known by its name; a hosted agent (a NeMo Gym
    server's) names them."""
    if environment is None or models is None:
        spec = AGENTS[agent]
        environment, models = spec.environment, (spec.model, *spec.other_models)
    models = sorted(set(models))
    consumer = f"gym-agent-{agent}"
    return Role(
        f"agent-{agent}",
        f"agent worker of {agent} (environment {environment}, models {', '.join(models)})",
        publish=(
            subjects.results_all(),
            f"gym.env.{environment}.>",
            subjects.service_ping(environment),
            *(subjects.model_responses(model) for model in models),
            *_stream_admin(subjects.TASKS_STREAM),
            *_stream_admin(subjects.RESULTS_STREAM),
            *_consumer(subjects.TASKS_STREAM, consumer),
        ),
        subscribe=(subjects.agent_run(agent), *_service(agent)),
        receives=(f"agent-{agent}",),
        answers_within=_T.agent_run + _T.late_reply,
    )


def environment_role(environment: str, models: Iterable[str] = ()) -> Role:
    """An environment worker: serves its own subjects only; may call `models` (judges)."""
    subjects.check_name(environment, "environment")
    return Role(
        f"env-{environment}",
        f"environment worker of {environment}",
        publish=(
            *(subjects.model_responses(model) for model in sorted(models)),
            *_kv(SESSIONS_BUCKET, f"{environment}.>"),
        ),
        subscribe=(f"gym.env.{environment}.>", *_service(environment)),
        receives=(f"env-{environment}",),
        answers_within=max(_T.seed, _T.tool, _T.verify) + _T.late_reply,
    )


def hosted_server_role(server: str, agents: Iterable[str], models: Iterable[str]) -> Role:
    """A worker hosting the NeMo Gym server `server` (`serve nemo-gym:<server>`): its
    environment, whose calls it forwards to the replica holding their session
    (`gym.env.<server>.r.<replica>.>`), its judges' `models`, and the `agents` its config
    declares, which the same process serves (each calling the server and `models`)."""
    models = sorted(set(models))
    environment = environment_role(server, models)
    forwards = Role("", "", publish=(f"gym.env.{server}.r.>",), subscribe=())
    return combined_role(
        f"nemo-gym-{server}",
        f"worker hosting the NeMo Gym server {server} and its agents {', '.join(agents) or '(none)'}",
        environment,
        forwards,
        *(agent_role(agent, server, models) for agent in agents),
    )


def model_role(model: str) -> Role:
    """A model worker serving `model` (whatever adapter it runs)."""
    return Role(
        f"model-{model}",
        f"model worker serving {model}",
        publish=(*_policies_read(),),
        subscribe=(subjects.model_responses(model), *_service(model)),
        receives=(f"model-{model}",),
        answers_within=_T.model + _T.late_reply,
    )


def worker_role(callers: Iterable[str] = ()) -> Role:
    """Every worker subject at once: the worker processes `gym-runner collect` and
    `verify` start for themselves on the embedded server. It answers its `callers`
    (identities: the embedded server's runner) by a grant on their inboxes, which costs
    nats-server nothing per request; with none, within `allow_responses` (which holds
    about 350 bytes per request answered for the whole window: an hour for this role)."""
    callers = tuple(callers)
    return Role(
        "worker",
        "any environment, agent and model (the embedded server's own workers)",
        publish=(
            subjects.results_all(),
            "gym.env.>",
            "gym.model.>",
            "$SRV.PING.>",
            *_stream_admin(subjects.TASKS_STREAM),
            *_stream_admin(subjects.RESULTS_STREAM),
            *_consumer(subjects.TASKS_STREAM, "*"),
            *_kv(SESSIONS_BUCKET),
            *_claim_store(),
            subjects.claims_all(),  # it reads every body: it is every function
            subjects.claim_reads(subjects.claims_all()),
            *(f"_INBOX.{caller}.>" for caller in callers),
            *_policies_read(),
        ),
        subscribe=("gym.env.>", "gym.model.>", "gym.agent.>", "$SRV.>"),
        answers_within=0.0 if callers else _T.agent_run + _T.late_reply,
    )


def adapters_role() -> Role:
    """`gym-runner sync-adapters` beside an inference server: reads the policy records and
    adapter objects, writes its server's report."""
    return Role(
        "adapters",
        "gym-runner sync-adapters: load a trainer's LoRA adapters into the vLLM server beside it",
        publish=(
            *_policies_read(),
            *_object_store(ADAPTERS_BUCKET, write=False),
            *_kv(ADAPTER_SERVERS_BUCKET),
        ),
        subscribe=(),
        claims=False,
    )


def _user(role: Role, public_key: str) -> str:
    permissions = json.dumps(role.permissions(public_key))
    return f"    # {role.name}: {role.description}\n    {{nkey: {public_key}, permissions: {permissions}}}"


def server_authorization(users: Sequence[tuple[Role, str]]) -> str:
    """The `authorization` block of a nats-server config: one nkey user per (role,
    public key), each with its role's permissions and its own inbox."""
    entries = ",\n".join(_user(role, key) for role, key in users)
    return f"authorization {{\n  users = [\n{entries}\n  ]\n}}\n"
