"""The `a2a` and `mcp` capability records, built from the facet rows and the served surfaces."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from apps.core.protocol import CONTRACT_VERSION
from apps.facets import surfaces
from apps.facets.models import Facet
from apps.facets.services import facet_ensure
from apps.runs.capabilities import stable_capability

logger = logging.getLogger(__name__)


def _common(facet: Facet, version_key: str, floor_key: str) -> dict[str, Any] | None:
    if facet.refreshed_at is None:
        # refreshedAt is required and we will not invent one: the facet stays unadvertised and loud.
        logger.error("%s facet has never been evaluated against the registry; not advertised", facet.protocol)
        return None
    record: dict[str, Any] = {
        "status": "stable",
        "since": CONTRACT_VERSION,
        "witness": "seam-gated",
        version_key: list(facet.versions),
        "preferredVersion": facet.preferred_version,
        floor_key: facet.minimum_version,
        "refreshedAt": facet.refreshed_at.isoformat(),
    }
    if facet.profiles:
        record["profiles"] = list(facet.profiles)
    return record


def a2a_capability() -> dict[str, Any] | None:
    if not surfaces.is_served(surfaces.A2A):
        return None
    facet = facet_ensure(protocol="a2a")
    record = _common(facet, "versions", "minimumVersion")
    if record is None:
        return None
    record["agentCardUrl"] = settings.OPENWOP_PUBLIC_URL + facet.agent_card_path
    record["streaming"] = facet.streaming and surfaces.is_served(surfaces.A2A_STREAMING)
    record["pushNotifications"] = facet.push_notifications and surfaces.is_served(surfaces.A2A_PUSH)
    record["durableTasks"] = facet.durable_tasks and surfaces.is_served(surfaces.A2A_DURABLE_TASKS)
    if facet.agent_cards and surfaces.is_served(surfaces.A2A_AGENT_CARDS):
        record["agentCards"] = True  # const true; absent when not offered
    return record


def mcp_capability() -> dict[str, Any] | None:
    if not surfaces.mcp_served():
        return None
    facet = facet_ensure(protocol="mcp")
    record = _common(facet, "revisions", "minimumRevision")
    if record is None:
        return None
    features = [f for f in facet.features if surfaces.is_served(surfaces.MCP_FEATURE_PREFIX + f)]
    if features:
        record["features"] = features
    transports = [
        t
        for t in facet.transports
        if surfaces.is_served(surfaces.MCP_STREAMABLE_HTTP if t == "streamable-http" else surfaces.MCP_STDIO)
    ]
    if surfaces.is_served(surfaces.MCP_STREAMABLE_HTTP) and "streamable-http" in transports:
        record["serverUrls"] = [settings.OPENWOP_PUBLIC_URL + path for path in facet.server_paths]
    if transports:
        record["serverMount"] = {"transports": transports}
    if surfaces.is_served(surfaces.MCP_FEATURE_PREFIX + "mrtr"):
        record["mrtr"] = {"maxRounds": facet.mrtr_max_rounds}
    if surfaces.is_served(surfaces.MCP_CLIENT):
        record["client"] = True  # host-services.md §mcp: ctx.mcp resolves to MCP results (RFC 0204)
    return record


def purpose_propagation_capability() -> dict[str, Any] | None:
    """`purposePropagation` (security-defaults.md §Onward hops): a received `permittedPurposes`
    label is re-emitted on the onward hop that carries the same data, never widened, and `[]`
    means no onward call. Advertised while a surface that honours it is served."""
    if not surfaces.is_served(surfaces.PURPOSE_PROPAGATION):
        return None
    return stable_capability(propagatesOnward=True)
