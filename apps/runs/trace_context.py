"""W3C Trace Context for runs (interop.md §Trace context).

A run carries one `traceparent` for its whole life: the one its caller sent when that was well
formed, else one minted here. Outbound calls a run makes (apps.peers) carry a child of it: the same
trace id, a fresh span id, so a peer's trace joins the run's. Trace context is observability only;
it never selects a tenant, principal or scope.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

# Version 00 (W3C Trace Context §3.2): all-zero trace or span ids are invalid.
_TRACEPARENT_RE = re.compile(r"^00-(?!0{32})([0-9a-f]{32})-(?!0{16})[0-9a-f]{16}-([0-9a-f]{2})$")
TRACESTATE_MAX = 512


@dataclass(frozen=True, slots=True)
class RunTrace:
    traceparent: str
    tracestate: str = ""


def traceparent_valid(value: object) -> bool:
    return isinstance(value, str) and _TRACEPARENT_RE.match(value) is not None


def trace_id_of(traceparent: str) -> str:
    """The 32-hex trace id of a valid traceparent."""
    match = _TRACEPARENT_RE.match(traceparent)
    if match is None:
        raise ValueError("not a valid traceparent")
    return match.group(1)


def traceparent_mint() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def traceparent_child(traceparent: str) -> str:
    """The same trace, a new span: what a run sends to a peer it calls."""
    match = _TRACEPARENT_RE.match(traceparent)
    if match is None:
        return traceparent_mint()
    return f"00-{match.group(1)}-{secrets.token_hex(8)}-{match.group(2)}"


def run_trace_from(traceparent: object, tracestate: object = None) -> RunTrace:
    """The caller's trace context when well formed, else a fresh one; a malformed or oversized
    tracestate is dropped rather than refused (a receiver ignores what it cannot use)."""
    if isinstance(traceparent, str) and traceparent_valid(traceparent.strip()):
        state = tracestate.strip() if isinstance(tracestate, str) and len(tracestate) <= TRACESTATE_MAX else ""
        return RunTrace(traceparent=traceparent.strip(), tracestate=state)
    return RunTrace(traceparent=traceparent_mint())
