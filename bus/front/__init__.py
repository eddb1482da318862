"""NeMo Gym's clients on the bus: what the HTTP front (`gym-runner front`) calls for each
of NeMo Gym's routes. A `/run` is a durable task of one long-lived run, so a worker killed
mid-rollout costs a redelivery; the environment and model routes are requests.
"""

from ._calls import FrontBus, Served, ServedAgent
from ._runs import LocalWorkers, Outcome, OutcomeStatus, RolloutRequests
from ._talk import talk

__all__ = [
    "LocalWorkers",
    "FrontBus",
    "Outcome",
    "OutcomeStatus",
    "RolloutRequests",
    "Served",
    "ServedAgent",
    "talk",
]
