"""Roles on a shared bus, each with only the subjects it needs, and the nats-server
configuration that enforces them.

| role                | may                                                                      |
| ------------------- | ------------------------------------------------------------------------ |
| `runner`            | publish tasks; read results (its runs'); request verifiers and agents    |
| `producer`          | publish tasks only                                                       |
| `agent-<agent>`     | take its agent's tasks; call its environment and models; publish results |
| `env-<env>`         | serve `gym.env.<env>.>`; keep its own sessions; call the named models    |
| `model-<model>`     | serve `gym.model.<model>.responses`                                      |
| `monitor`           | the Services API (`$SRV`) and the task queues' depth                     |
| `worker`            | every worker subject (the embedded server's all-in-one worker processes) |
| `adapters`          | `gym-runner sync-adapters`: read policy records and adapters, report     |

A trainer (the `runner` role) writes policy records and adapter objects; model workers
read the records (the current version of each policy); a server's syncer reads both and
writes its own report, which the trainer reads.

Only agents (and the embedded all-in-one worker) may publish to `gym.results.>`. Every
identity subscribes only to its own inbox, `_INBOX.<identity>.>` (see
`bus._auth.inbox_prefix_for`), so no role reads another's replies; replies themselves
go to `_INBOX.>`, whose tokens are unguessable. JetStream's API is granted per stream
and consumer, so a producer cannot open a consumer on the results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gymbus.functions import AGENTS

from . import _subjects as subjects
from ._claims import CLAIMS_BUCKET
from ._policy import ADAPTER_SERVERS_BUCKET, ADAPTERS_BUCKET, POLICIES_BUCKET
from ._runkeys import RUNS_BUCKET
from ._sessions import SESSIONS_BUCKET

__all__ = [
    "Role",
    "adapters_role",
    "agent_role",
    "environment_role",
    "model_role",
    "monitor_role",
    "producer_role",
    "runner_role",
    "server_authorization",
    "worker_role",
]

_API = "$JS.API"


@dataclass(frozen=True)
class Role:
    """What one kind of process may publish and subscribe to (its inbox aside)."""

    name: str
    description: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


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


def _claims() -> list[str]:
    """Claim checks: put and get big bodies in the object store."""
    return _object_store(CLAIMS_BUCKET)


def _object_store(bucket: str, *, write: bool = True) -> list[str]:
    """Get objects of an object store (its chunks through an ordered consumer), and with
    `write` put and delete them."""
    stream = f"OBJ_{bucket}"
    reading = [
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


_REPLIES = "_INBOX.>"  # a worker answers requests on their (unguessable) reply subjects


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
            *_claims(),
            # A trainer publishes its policy's versions and follows its servers' reports.
            *_kv(POLICIES_BUCKET),
            f"{_API}.STREAM.UPDATE.KV_{POLICIES_BUCKET}",
            *_object_store(ADAPTERS_BUCKET),
            *_kv_follow(ADAPTER_SERVERS_BUCKET),
        ),
        subscribe=(subjects.max_deliveries(subjects.TASKS_STREAM),),
    )


def producer_role() -> Role:
    return Role(
        "producer",
        "publishes rollout tasks only; cannot read results",
        publish=(subjects.tasks_all(), f"{_API}.STREAM.INFO.{subjects.TASKS_STREAM}", *_claims()),
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
    )


def agent_role(agent: str) -> Role:
    """An agent worker: its task queue, its environment and models, and the results."""
    spec = AGENTS[agent]
    models = sorted({spec.model, *spec.other_models})
    consumer = f"gym-agent-{agent}"
    return Role(
        f"agent-{agent}",
        f"agent worker of {agent} (environment {spec.environment}, models {', '.join(models)})",
        publish=(
            _REPLIES,
            subjects.results_all(),
            f"gym.env.{spec.environment}.>",
            subjects.service_ping(spec.environment),
            *(subjects.model_responses(model) for model in models),
            *_stream_admin(subjects.TASKS_STREAM),
            *_stream_admin(subjects.RESULTS_STREAM),
            *_consumer(subjects.TASKS_STREAM, consumer),
            *_claims(),
        ),
        subscribe=(subjects.agent_run(agent), *_service(agent)),
    )


def environment_role(environment: str, models: Iterable[str] = ()) -> Role:
    """An environment worker: serves its own subjects only; may call `models` (judges)."""
    subjects.check_name(environment, "environment")
    return Role(
        f"env-{environment}",
        f"environment worker of {environment}",
        publish=(
            _REPLIES,
            *(subjects.model_responses(model) for model in sorted(models)),
            *_kv(SESSIONS_BUCKET, f"{environment}.>"),
            *_claims(),
        ),
        subscribe=(f"gym.env.{environment}.>", *_service(environment)),
    )


def model_role(model: str) -> Role:
    """A model worker serving `model` (whatever adapter it runs)."""
    return Role(
        f"model-{model}",
        f"model worker serving {model}",
        publish=(_REPLIES, *_claims(), *_policies_read()),
        subscribe=(subjects.model_responses(model), *_service(model)),
    )


def worker_role() -> Role:
    """Every worker subject at once: the worker processes `gym-runner collect` and
    `verify` start for themselves on the embedded server."""
    return Role(
        "worker",
        "any environment, agent and model (the embedded server's own workers)",
        publish=(
            _REPLIES,
            subjects.results_all(),
            "gym.env.>",
            "gym.model.>",
            "$SRV.PING.>",
            *_stream_admin(subjects.TASKS_STREAM),
            *_stream_admin(subjects.RESULTS_STREAM),
            *_consumer(subjects.TASKS_STREAM, "*"),
            *_kv(SESSIONS_BUCKET),
            *_claims(),
            *_policies_read(),
        ),
        subscribe=("gym.env.>", "gym.model.>", "gym.agent.>", "$SRV.>"),
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
    )


def _user(role: Role, public_key: str) -> str:
    inbox = f"_INBOX.{public_key}.>"
    permissions = {
        "publish": {"allow": list(role.publish)},
        "subscribe": {"allow": [inbox, *role.subscribe]},
    }
    return f"    # {role.name}: {role.description}\n    {{nkey: {public_key}, permissions: {json.dumps(permissions)}}}"


def server_authorization(users: Sequence[tuple[Role, str]]) -> str:
    """The `authorization` block of a nats-server config: one nkey user per (role,
    public key), each with its role's permissions and its own inbox."""
    entries = ",\n".join(_user(role, key) for role, key in users)
    return f"authorization {{\n  users = [\n{entries}\n  ]\n}}\n"
