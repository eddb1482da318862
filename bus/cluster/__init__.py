"""Setting up the bus's storage on a cluster that may still be forming: replica counts,
key-value buckets, and the server's refusals told apart from its being away.
"""

from ._buckets import open_key_value
from ._forming import PEERS_UNKNOWN, retry_while_forming
from ._refusals import refusals, was_refused
from ._replicas import replicas_from_env, replicas_of, set_replicas

__all__ = [
    "PEERS_UNKNOWN",
    "open_key_value",
    "refusals",
    "replicas_from_env",
    "replicas_of",
    "retry_while_forming",
    "set_replicas",
    "was_refused",
]
