"""How a message travels: its subject (the names module), its encoding, a request with its
timeout and error reply, retries, and claim checks for bodies over the max payload.
"""

from . import _subjects as subjects
from ._claim_checks import (
    CLAIM,
    check_in,
    check_in_when_room,
    check_out,
    claim_store_config,
    ensure_claim_store,
    needs_claim,
    release_claim,
)
from ._codec import decode, decoder, encode, encode_error_reply, error_from_reply, nested_deeper
from ._request import WorkerSilent, request
from ._retry import retrying
from ._subjects import (
    ADAPTER_SERVERS_BUCKET,
    ADAPTERS_BUCKET,
    POLICIES_BUCKET,
    RUNS_BUCKET,
    SESSIONS_BUCKET,
    is_name,
)

__all__ = [
    "ADAPTERS_BUCKET",
    "ADAPTER_SERVERS_BUCKET",
    "CLAIM",
    "POLICIES_BUCKET",
    "RUNS_BUCKET",
    "SESSIONS_BUCKET",
    "WorkerSilent",
    "check_in",
    "check_in_when_room",
    "check_out",
    "claim_store_config",
    "decode",
    "decoder",
    "encode",
    "encode_error_reply",
    "ensure_claim_store",
    "error_from_reply",
    "is_name",
    "needs_claim",
    "nested_deeper",
    "release_claim",
    "request",
    "retrying",
    "subjects",
]
