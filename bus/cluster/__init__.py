"""The connection's owner (`Connection`: what is kept per connection), and setting up the
bus's storage on a cluster that may still be forming: replica counts, key-value buckets, and
the server's refusals told apart from its being away.
"""

from ._buckets import open_key_value
from ._connection import Connection
from ._forming import PEERS_UNKNOWN, retry_while_forming
from ._replicas import replicas_from_env

__all__ = [
    "PEERS_UNKNOWN",
    "Connection",
    "open_key_value",
    "replicas_from_env",
    "retry_while_forming",
]
