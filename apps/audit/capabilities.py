"""The `hostEvents` discovery record: the host-event types this host emits and each one's class.

Shape: the capability-record base (`status`, `since`, `witness`) plus `types[]` of
`{type, delivery}` (RFC 0241 §B.1, interop.md §The audit event). The record's own schema is not
in the vendored copies (reference/openwop-v2.md item 27); this follows the upstream conformance
suite's reading of `hostEvents.types[]`.
"""

from __future__ import annotations

from typing import Any

from apps.audit.host_event_types import advertised_host_event_types
from apps.core.protocol import CONTRACT_VERSION

# `since` is this host's own contract minor at which it began serving the family; it must be one
# of its protocolVersions (capabilities.schema.json, ruled 2026-09-11).
HOST_EVENTS_SINCE = CONTRACT_VERSION


def host_events_capability() -> dict[str, Any]:
    return {
        "status": "stable",
        "since": HOST_EVENTS_SINCE,
        "witness": "witnessable-gated",  # RFC 0241: observable through emitTestHostEvent
        "types": [{"type": t.type, "delivery": str(t.delivery)} for t in advertised_host_event_types()],
    }
