"""Version grammars and ordering for the two embedded protocols (interop.md §The facets).

A2A versions are `major.minor`; MCP revisions are ISO dates. Both order as tuples of integers.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

Protocol = Literal["a2a", "mcp"]
PROTOCOLS: tuple[Protocol, ...] = ("a2a", "mcp")

A2A_VERSION_RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)$")
MCP_REVISION_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
NOUN = {"a2a": "version", "mcp": "revision"}
GRAMMAR = {"a2a": "major.minor (e.g. 1.0)", "mcp": "a date YYYY-MM-DD (e.g. 2026-07-28)"}
PROFILE_RE = {
    "a2a": re.compile(r"^a2a-(0|[1-9]\d*)\.(0|[1-9]\d*)$"),
    "mcp": re.compile(r"^mcp-(\d{4}-\d{2}-\d{2})$"),
}


def is_valid_version(protocol: Protocol, value: object) -> bool:
    if not isinstance(value, str):
        return False
    if protocol == "a2a":
        return bool(A2A_VERSION_RE.match(value))
    if not MCP_REVISION_RE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def version_key(protocol: Protocol, value: str) -> tuple[int, ...]:
    """Sort key; raises ValueError for a value outside the protocol's grammar."""
    if not is_valid_version(protocol, value):
        raise ValueError(f"{value!r} is not an {protocol.upper()} version")
    sep = "." if protocol == "a2a" else "-"
    return tuple(int(part) for part in value.split(sep))


def profile_version(protocol: Protocol, profile: str) -> str | None:
    """The version a profile id names, or None when the id is not a valid profile of `protocol`."""
    match = PROFILE_RE[protocol].match(profile)
    if not match:
        return None
    version = profile.removeprefix(f"{protocol}-")
    return version if is_valid_version(protocol, version) else None
