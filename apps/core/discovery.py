"""The discovery document, built by one function (capabilities.md §3).

The root is closed: metadata keys plus one capability record per family the host really serves.
Apps register a builder per family in their AppConfig.ready(); a builder returns the record, or
None when the family is not served right now (the record's presence is the claim: no `supported`
flags, no facet keys for what is not offered). Forbidden at the root, always: `supportedTransports`,
`grpc`, `profiles`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings

from apps.core.protocol import PREFERRED_VERSION, PROTOCOL_VERSIONS

CapabilityBuilder = Callable[[], dict[str, Any] | None]

FORBIDDEN_ROOT_KEYS = frozenset({"supportedTransports", "grpc", "profiles", "contractProvenance"})
EVENT_LOG_SCHEMA_VERSION = 3
ENGINE_VERSION = 1

_capabilities: dict[str, CapabilityBuilder] = {}
_extensions: dict[str, CapabilityBuilder] = {}
_fixture_sources: list[Callable[[], list[str]]] = []
EXTENSION_KEY_RE = re.compile(r"^[a-z][a-z0-9-]*\.[A-Za-z][A-Za-z0-9-]*$")


def register_capability(family: str, builder: CapabilityBuilder) -> None:
    if family in FORBIDDEN_ROOT_KEYS or "." in family:
        raise ValueError(f"{family!r} may not appear at the discovery root")
    _capabilities[family] = builder


def register_extension(key: str, builder: CapabilityBuilder) -> None:
    """A root `extensions` entry `<org>.<name>`; the builder returns None when there is nothing to say."""
    if not EXTENSION_KEY_RE.match(key) or key.split(".")[0] in {"openwop", "vendor", "effect-seams", "events"}:
        raise ValueError(f"{key!r} is not an extension key this host may use")
    _extensions[key] = builder


def register_fixture_source(source: Callable[[], list[str]]) -> None:
    if source not in _fixture_sources:
        _fixture_sources.append(source)


def discovery_document() -> dict[str, Any]:
    fixtures = sorted({f for source in _fixture_sources for f in source()})
    doc: dict[str, Any] = {
        "protocolVersions": list(PROTOCOL_VERSIONS),
        "preferredVersion": PREFERRED_VERSION,
        "protocolVersion": PREFERRED_VERSION,
        "implementation": {
            "name": "openwop-host",
            "version": settings.SPECTACULAR_SETTINGS["VERSION"],
            "url": settings.OPENWOP_PUBLIC_URL,
        },
        "engineVersion": ENGINE_VERSION,
        "eventLogSchemaVersion": EVENT_LOG_SCHEMA_VERSION,
        "fixtures": fixtures,
    }
    for family in sorted(_capabilities):
        record = _capabilities[family]()
        if record is not None:
            doc[family] = record
    extensions = {key: value for key in sorted(_extensions) if (value := _extensions[key]()) is not None}
    if extensions:
        doc["extensions"] = extensions
    return doc


def discovery_bytes_and_etag() -> tuple[bytes, str]:
    """Canonical bytes (sorted keys) and a strong ETag over them: new semantics, new bytes."""
    body = json.dumps(discovery_document(), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return body, '"' + hashlib.sha256(body).hexdigest()[:40] + '"'
