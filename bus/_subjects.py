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

A name is one subject token: letters, digits, `_` and `-`.
"""

from __future__ import annotations

import re

from gymbus.schemas import NotFound

__all__ = [
    "RESULTS_STREAM",
    "TASKS_STREAM",
    "UNROUTED_RUN",
    "agent_of_tasks",
    "agent_run",
    "check_name",
    "consumer_next",
    "env_replica_tool",
    "env_replica_verify",
    "env_seed",
    "env_tool",
    "env_verify",
    "is_name",
    "model_responses",
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
