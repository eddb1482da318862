"""The policy under training on the bus: its published versions, the adapters stored
for inference servers, and the syncers that keep a server's adapters current.
"""

from __future__ import annotations

from ._policy import (
    ADAPTERS_BUCKET,
    ADAPTER_SERVERS_BUCKET,
    POLICIES_BUCKET,
    PolicyPublisher,
    PolicyVersions,
    Published,
    adapter_files,
    adapter_reports,
    adapter_store,
    live_reports,
    policy_records,
)
from ._follow import KeyFollower
from ._adapter_sync import AdapterSyncer, sync_adapters

__all__ = [
    "ADAPTERS_BUCKET",
    "ADAPTER_SERVERS_BUCKET",
    "AdapterSyncer",
    "KeyFollower",
    "POLICIES_BUCKET",
    "PolicyPublisher",
    "PolicyVersions",
    "Published",
    "adapter_files",
    "adapter_reports",
    "adapter_store",
    "live_reports",
    "policy_records",
    "sync_adapters",
]
