"""Every subject GymBus uses is built here, from validated single-token names.

    gym.model.<model>.responses      one generation (Responses API in and out)
    gym.env.<env>.seed               set up a session
    gym.env.<env>.tool.<tool>        one tool call
    gym.env.<env>.verify             reward a finished rollout
    gym.env.<env>.r.<replica>.tool.<tool>, gym.env.<env>.r.<replica>.verify
                                     the same, served only by one replica of an environment
                                     that keeps sessions in its own process (a hosted NeMo
                                     Gym server): where other replicas forward its sessions' calls
    gym.agent.<agent>.run            one whole rollout, synchronously
    gym.tasks.<agent>                rollout tasks (JetStream work queue)
    gym.results.<run>                rewarded rollouts of one collection (JetStream)
    gym.results.unrouted             results of tasks published without a (valid) `Gym-Run`
    $SRV.PING|INFO|STATS[.<name>]    the NATS Services API: the live functions (called <name>)
    $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
                                     JetStream's pull request for a durable consumer's messages
    gym.claims.<receiver>.<sender>.<id>.<chunk>
                                     one chunk of a body too big for one message (GYM_CLAIMS)
    _INBOX.<identity>.<...>          replies to the requests of one identity (`bus.security._auth`)

A name is one subject token: letters, digits, `_` and `-`.
"""

from __future__ import annotations

import re

from gymbus.schemas import NotFound

__all__ = [
    "ANYONE",
    "ADAPTERS_BUCKET",
    "ADAPTER_SERVERS_BUCKET",
    "CLAIMS_STREAM",
    "POLICIES_BUCKET",
    "RESULTS_STREAM",
    "RUNS_BUCKET",
    "SESSIONS_BUCKET",
    "TASKS_STREAM",
    "UNROUTED_RUN",
    "agent_of_tasks",
    "agent_run",
    "check_name",
    "claim_chunk",
    "claim_prefix",
    "claim_reads",
    "claims_all",
    "claims_from",
    "claims_to",
    "consumer_next",
    "env_replica_tool",
    "env_replica_verify",
    "env_seed",
    "env_tool",
    "env_verify",
    "identity_of_inbox",
    "is_claim_prefix",
    "is_inbox",
    "is_name",
    "model_responses",
    "receiver_of",
    "results",
    "results_all",
    "service_info",
    "service_ping",
    "service_stats",
    "tasks",
    "tasks_all",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")

TASKS_STREAM = "GYM_TASKS"
RESULTS_STREAM = "GYM_RESULTS"
CLAIMS_STREAM = "GYM_CLAIMS"
# Key-value and object buckets: named here, beside the streams, because the roles that
# grant access to them are written before (and below) the modules that use them.
RUNS_BUCKET = "gym_runs"
SESSIONS_BUCKET = "gym_sessions"
POLICIES_BUCKET = "gym_policies"
ADAPTER_SERVERS_BUCKET = "gym_adapter_servers"
ADAPTERS_BUCKET = "gym_adapters"
ANYONE = "anyone"
"""The receiver of bodies sent on a subject no GymBus role serves (on a locked bus only a
role that reads every body, the embedded server's `worker`, can read them)."""
_INBOX = "_INBOX"
UNROUTED_RUN = "unrouted"
"""The run whose results stream gets the results of tasks that named no run."""


def is_name(name: str) -> bool:
    """Whether `name` can be a subject token."""
    return bool(_NAME.match(name))


def check_name(name: str, what: str = "name") -> str:
    """`name`, or `NotFound` saying why it cannot be a subject token."""
    if not is_name(name):
        raise NotFound(f"{what} {name!r} is not a valid name (letters, digits, '_' and '-' only)")
    return name


def model_responses(model: str) -> str:
    return f"gym.model.{check_name(model, 'model')}.responses"


def env_seed(env: str) -> str:
    return f"gym.env.{check_name(env, 'environment')}.seed"


def env_tool(env: str, tool: str) -> str:
    return f"gym.env.{check_name(env, 'environment')}.tool.{check_name(tool, 'tool')}"


def env_verify(env: str) -> str:
    return f"gym.env.{check_name(env, 'environment')}.verify"


def env_replica_tool(env: str, replica: str, tool: str) -> str:
    env, replica = check_name(env, "environment"), check_name(replica, "replica")
    return f"gym.env.{env}.r.{replica}.tool.{check_name(tool, 'tool')}"


def env_replica_verify(env: str, replica: str) -> str:
    return f"gym.env.{check_name(env, 'environment')}.r.{check_name(replica, 'replica')}.verify"


def agent_run(agent: str) -> str:
    return f"gym.agent.{check_name(agent, 'agent')}.run"


def tasks(agent: str) -> str:
    return f"gym.tasks.{check_name(agent, 'agent')}"


def agent_of_tasks(subject: str) -> str:
    """The agent whose task queue `subject` is (`gym.tasks.<agent>`)."""
    return subject.removeprefix("gym.tasks.")


def tasks_all() -> str:
    return "gym.tasks.>"


def results(run_id: str) -> str:
    return f"gym.results.{check_name(run_id, 'run')}"


def results_all() -> str:
    return "gym.results.>"


def service_ping(name: str) -> str:
    return f"$SRV.PING.{check_name(name, 'function')}"


def service_info(name: str | None = None) -> str:
    return "$SRV.INFO" + (f".{check_name(name, 'function')}" if name else "")


def service_stats(name: str | None = None) -> str:
    return "$SRV.STATS" + (f".{check_name(name, 'function')}" if name else "")


def consumer_next(stream: str, consumer: str) -> str:
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


def max_deliveries(stream: str) -> str:
    """JetStream's advisories for `stream`'s messages that reached a consumer's `max_deliver`."""
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.*"


def is_inbox(subject: str) -> bool:
    """Whether `subject` is a reply inbox (`_INBOX.<...>`): the only subjects a service
    answers on. Anything else as a reply subject is a requester aiming the service's answer
    (or an empty keep-alive, which JetStream's API reads as a valid request) at a subject
    it may not publish to itself."""
    return subject.startswith(_INBOX + ".") and len(subject) > len(_INBOX) + 1


def identity_of_inbox(inbox: str) -> str | None:
    """The identity whose replies come on `inbox`: its second token (`_INBOX.<identity>.<nuid>`,
    `bus.security._auth.inbox_prefix_for`); `None` for a plain `_INBOX.<nuid>` (no identity)."""
    parts = inbox.split(".")
    return parts[1] if len(parts) >= 3 and parts[0] == _INBOX and is_name(parts[1]) else None


def receiver_of(subject: str) -> str:
    """Who reads a body sent on `subject` by claim check: the role serving it (`env-<env>`,
    `model-<model>`, `agent-<agent>`, `runner` for results) or, for a reply, the requester's
    identity (its inbox's second token). `ANYONE` for a subject GymBus does not know."""
    parts = subject.split(".")
    if parts[0] == _INBOX and len(parts) >= 2 and is_name(parts[1]):
        return parts[1]
    if len(parts) >= 3 and parts[0] == "gym" and is_name(parts[2]):
        kind = {"env": "env", "model": "model", "agent": "agent", "tasks": "agent"}.get(parts[1])
        if kind:
            return f"{kind}-{parts[2]}"
        if parts[1] == "results":
            return "runner"
    return ANYONE


def claims_all() -> str:
    return "gym.claims.>"


def claims_to(receiver: str) -> str:
    """Every body addressed to `receiver`."""
    return f"gym.claims.{check_name(receiver, 'receiver')}.>"


def claims_from(sender: str) -> str:
    """Every body `sender` wrote, to anyone."""
    return f"gym.claims.*.{check_name(sender, 'sender')}.>"


def claim_reads(subjects: str) -> str:
    """The JetStream API subject that reads the claim chunks `subjects` names (a direct
    get of the last message on each subject: no consumer, no read by sequence)."""
    return f"$JS.API.DIRECT.GET.{CLAIMS_STREAM}.{subjects}"


def claim_prefix(receiver: str, sender: str, body: str) -> str:
    """The subjects of one claimed body, less its chunk index."""
    return f"gym.claims.{check_name(receiver, 'receiver')}.{check_name(sender, 'sender')}.{check_name(body, 'body id')}"


def is_claim_prefix(prefix: str) -> bool:
    """Whether `prefix` is one body's subjects (`gym.claims.<receiver>.<sender>.<id>`)."""
    parts = prefix.split(".")
    return len(parts) == 5 and parts[:2] == ["gym", "claims"] and all(is_name(part) for part in parts[2:])


def claim_chunk(prefix: str, index: int) -> str:
    return f"{prefix}.{index}"
