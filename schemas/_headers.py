"""The message headers of the protocol, and the one place each is read.

| header            | on                       | value                                                   |
| ----------------- | ------------------------ | ------------------------------------------------------- |
| `Gym-Session`     | every call of a rollout  | the rollout's session id                                |
| `Gym-Deadline`    | tasks and calls          | unix time (seconds) after which the work is dropped     |
| `Gym-Run`         | tasks                    | the run whose results stream (`gym.results.<run>`) gets the result |
|                   |                          | (none, or not a subject token: `gym.results.unrouted`)  |
| `Gym-Seq`         | tasks and results        | the task's position in its run (0-based)                |
| `Gym-Attempt`     | tasks and results        | earlier failed attempts of this rollout (`--resume`)    |
| `Gym-Token`       | tasks and results        | the runner's signature of the task (`bus.run._runkeys`), echoed on its result |
| `Gym-Delivery`    | set by an agent worker   | how many times JetStream delivered the task             |
| `Gym-Task`        | results                  | the task's sequence number in GYM_TASKS (its publish ack's `seq`) |
| `Gym-Working`     | empty replies            | keep-alive: the request is still being worked on        |
| `Gym-Claim`       | any message              | `<prefix>;<chunks>;<sha256>`: the body is in the claim store (`bus.wire._claim_checks`) |
| `Nats-Msg-Id`     | tasks and results        | `<run>.<seq>.<attempt>` (a result's adds its token): JetStream drops a repeat |
| `Nats-Service-Error`, `Nats-Service-Error-Code` | error replies | the error's message and code (`schemas._errors`) |

A header that is missing or does not parse reads as its default: a deadline of `None`
means none was set.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

__all__ = [
    "ATTEMPT",
    "CLAIM",
    "DEADLINE",
    "DELIVERY",
    "ERROR",
    "ERROR_CODE",
    "MSG_ID",
    "RUN",
    "SEQ",
    "SESSION",
    "TASK",
    "TOKEN",
    "WORKING",
    "deadline_of",
    "deadline_passed",
    "header_int",
    "seconds_left",
    "task_id",
]

SESSION = "Gym-Session"
DEADLINE = "Gym-Deadline"
RUN = "Gym-Run"
SEQ = "Gym-Seq"
ATTEMPT = "Gym-Attempt"
TOKEN = "Gym-Token"
DELIVERY = "Gym-Delivery"
TASK = "Gym-Task"
WORKING = "Gym-Working"
CLAIM = "Gym-Claim"
MSG_ID = "Nats-Msg-Id"
ERROR = "Nats-Service-Error"
ERROR_CODE = "Nats-Service-Error-Code"


def task_id(run_id: str, seq: int | str, attempt: int | str) -> str:
    """`<run>.<seq>.<attempt>`: one try of one task, everywhere it is named (its message
    id, the message its token signs, its result's message id)."""
    return f"{run_id}.{seq}.{attempt}"


def deadline_of(headers: Mapping[str, str] | None) -> float | None:
    """The `Gym-Deadline` (unix seconds), or `None` if there is none or it is not a number."""
    try:
        return float(headers[DEADLINE]) if headers else None
    except (KeyError, ValueError):
        return None


def seconds_left(headers: Mapping[str, str] | None) -> float | None:
    """Seconds until the `Gym-Deadline` (negative once past), or `None` if there is none."""
    deadline = deadline_of(headers)
    return None if deadline is None else deadline - time.time()


def deadline_passed(headers: Mapping[str, str] | None) -> bool:
    """Whether the `Gym-Deadline` is in the past (never, if there is none)."""
    left = seconds_left(headers)
    return left is not None and left < 0


def header_int(headers: Mapping[str, str] | None, name: str, default: int) -> int:
    """The integer header `name`, or `default` if it is missing or not an integer."""
    try:
        return int(headers[name]) if headers else default
    except (KeyError, ValueError):
        return default
