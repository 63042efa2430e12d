"""The public agent card and the capability flags it shares with dispatch (map `a2a.card` rules).

`capabilities` equal the facets as discovery advertises them (a facet flag counts only when the
surface is served), `supportedInterfaces[].protocolVersion` values equal `a2a.versions` (JSONRPC
first, then HTTP+JSON), `securitySchemes` is the bearer scheme actually enforced, and `skills[]`
is one skill per routed workflow, the default first. The card carries no per-agent `tenant`.

`agent_card` is the per-agent projection (interop.md §Per-agent cards): the host card with the
agent's name, version and description, every interface carrying the agent's `tenant: R`, and one
skill per workflow routed to the agent for the caller. `capabilities.extendedAgentCard` is true
exactly while per-agent cards are served (facet switch AND the `a2a.agent-cards` surface).
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.types import AgentCard
from django.conf import settings
from google.protobuf import json_format

from apps.a2a.models import SkillRoute
from apps.a2a.selectors import skill_routes_enabled
from apps.a2a.services import skill_routes_ensure
from apps.agents.selectors import InventoryEntry
from apps.facets import surfaces
from apps.facets.models import Facet
from apps.facets.services import facet_ensure

JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
BEARER_SCHEME = "bearer"
MEDIA_MODES = ["text/plain", "application/json"]


@dataclass(frozen=True, slots=True)
class A2AFeatures:
    """What this host serves right now: facet switch AND served surface (capabilities.md)."""

    streaming: bool
    push_notifications: bool
    durable_tasks: bool
    versions: tuple[str, ...]
    preferred_version: str
    agent_cards: bool = False


def features_of(facet: Facet) -> A2AFeatures:
    return A2AFeatures(
        streaming=facet.streaming and surfaces.is_served(surfaces.A2A_STREAMING),
        push_notifications=facet.push_notifications and surfaces.is_served(surfaces.A2A_PUSH),
        durable_tasks=facet.durable_tasks and surfaces.is_served(surfaces.A2A_DURABLE_TASKS),
        versions=tuple(facet.versions),
        preferred_version=facet.preferred_version,
        agent_cards=facet.agent_cards and surfaces.is_served(surfaces.A2A_AGENT_CARDS),
    )


def features_current() -> A2AFeatures:
    return features_of(facet_ensure(protocol="a2a"))


def _ordered_versions(features: A2AFeatures) -> list[str]:
    rest = [v for v in features.versions if v != features.preferred_version]
    return [features.preferred_version, *rest] if features.preferred_version in features.versions else rest


def public_card(*, features: A2AFeatures, routes: list[SkillRoute]) -> AgentCard:
    base = settings.OPENWOP_PUBLIC_URL
    interfaces = [
        {"url": base + path, "protocolBinding": binding, "protocolVersion": version}
        for version in _ordered_versions(features)
        for binding, path in (("JSONRPC", JSONRPC_PATH), ("HTTP+JSON", REST_PATH))
    ]
    document = {
        "name": "openwop-host",
        "description": "An OpenWOP v2 host. Each skill runs one workflow of the caller's tenant as a task.",
        "supportedInterfaces": interfaces,
        "provider": {"organization": "openwop-host", "url": base},
        "version": settings.SPECTACULAR_SETTINGS["VERSION"],
        "capabilities": {
            "streaming": features.streaming,
            "pushNotifications": features.push_notifications,
            "extendedAgentCard": features.agent_cards,
        },
        "securitySchemes": {
            BEARER_SCHEME: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "OpenWOP API key",
                    "description": "Authorization: Bearer <api key>; the key's tenant and subject are the caller.",
                }
            }
        },
        "securityRequirements": [{"schemes": {BEARER_SCHEME: {"list": []}}}],
        "defaultInputModes": MEDIA_MODES,
        "defaultOutputModes": MEDIA_MODES,
        "skills": [
            {
                "id": route.workflow_id,
                "name": route.name or route.workflow_id,
                "description": route.description or route.name or route.workflow_id,
                "tags": [str(t) for t in route.tags] or ["workflow"],
            }
            for route in routes
        ],
    }
    return json_format.ParseDict(document, AgentCard())


def agent_card(*, host_card: AgentCard, entry: InventoryEntry) -> AgentCard:
    """The agent's card, projected from the host card and its inventory entry only: nothing the
    entry may not carry (no prompt, no handoff schema; `degraded[]` stays on the entry)."""
    assert entry.a2a_tenant is not None  # only routed agents have an R
    agent = entry.agent
    card = AgentCard()
    card.CopyFrom(host_card)
    card.name = agent.persona
    card.version = agent.pack_version
    card.description = agent.description or agent.label or agent.persona
    for interface in card.supported_interfaces:
        interface.tenant = entry.a2a_tenant
    del card.skills[:]
    for workflow in entry.workflows:
        card.skills.add(
            id=workflow.workflow_id,
            name=workflow.name or workflow.workflow_id,
            description=workflow.description or workflow.name or workflow.workflow_id,
            tags=["workflow"],
        )
    return card


def public_card_current() -> tuple[AgentCard, list[SkillRoute], Facet]:
    skill_routes_ensure()
    facet = facet_ensure(protocol="a2a")
    routes = skill_routes_enabled()
    return public_card(features=features_of(facet), routes=routes), routes, facet
