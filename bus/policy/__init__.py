"""The policy under training on the bus: its published versions, the adapters stored
for inference servers, and the syncers that keep a server's adapters current.
"""

from ._adapter_sync import AdapterSyncer, sync_adapters
from ._follow import KeyFollower
from ._policy import (
    PolicyPublisher,
    PolicyVersions,
    Published,
    adapter_files,
    adapter_reports,
    adapter_store,
    live_reports,
    policy_records,
)

__all__ = [
    "AdapterSyncer",
    "KeyFollower",
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
