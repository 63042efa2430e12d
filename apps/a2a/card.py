"""The public agent card and the capability flags it shares with dispatch (map `a2a.card` rules).

`capabilities` equal the facets as discovery advertises them (a facet flag counts only when the
surface is served), `supportedInterfaces[].protocolVersion` values equal `a2a.versions` (JSONRPC
first, then HTTP+JSON, then GRPC while grpc_serve is configured to run), `securitySchemes` are the
schemes actually enforced (the API-key bearer, and one OAuth2 / OpenID Connect scheme per enabled
trusted issuer, each an alternative in `securityRequirements`), and `skills[]` is one skill per
routed workflow, the default first. The card carries no per-agent `tenant`.

`agent_card` is the per-agent projection (interop.md §Per-agent cards): the host card with the
agent's name, version and description, every interface carrying the agent's `tenant: R`, and one
skill per workflow routed to the agent for the caller. `capabilities.extendedAgentCard` is true
exactly while per-agent cards are served (facet switch AND the `a2a.agent-cards` surface).

Every served card (public, per-agent, at a moved path) carries `signatures[]` by the active
signing key (apps/a2a/signing.py) when one is active; it is signed once per card version, when the
cached form below is built, never per request.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from a2a.types import AgentCard
from asgiref.sync import sync_to_async
from django.conf import settings
from google.protobuf import json_format

from apps.a2a.models import SkillRoute
from apps.a2a.selectors import skill_route_pin_current, skill_routes_enabled
from apps.a2a.services import skill_routes_ensure
from apps.a2a.signing import card_sign, card_signing_key_active
from apps.agents.selectors import InventoryEntry, agent_by_a2a_tenant
from apps.core.invalidation import TOPIC_CARD, acached, cached
from apps.core.protocol_versions import is_valid_version, version_key
from apps.facets import surfaces
from apps.facets.models import Facet
from apps.facets.policy import agent_floor
from apps.facets.services import facet_cached, facet_ensure
from apps.oauth.models import TrustedIssuer
from apps.oauth.selectors import trusted_issuers
from apps.runs.a2a_wire import to_wire
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)

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


def grpc_interface_url() -> str | None:
    """Where the card says the gRPC binding is (`host:port`), or None while this deployment does
    not serve it (`OPENWOP_GRPC_ENABLED`: `make run` and docker/ set it, they start grpc_serve)."""
    return settings.OPENWOP_GRPC_URL if settings.OPENWOP_GRPC_ENABLED else None


def _ordered_versions(features: A2AFeatures) -> list[str]:
    rest = [v for v in features.versions if v != features.preferred_version]
    return [features.preferred_version, *rest] if features.preferred_version in features.versions else rest


def _scheme_name(issuer: TrustedIssuer) -> str:
    """Stable per issuer (a digest of its URL, so adding another never renames this one)."""
    return f"{issuer.lane}-{hashlib.sha256(issuer.issuer.encode()).hexdigest()[:10]}"


def _oauth_scheme(issuer: TrustedIssuer) -> dict[str, Any] | None:
    """The issuer's A2A security scheme: OpenID Connect discovery for an `oidc` issuer, the
    authorization code flow with PKCE for an `oauth2` one (None while its RFC 8414 metadata
    lacks the endpoints: never fetched, or not an authorization-code server)."""
    audience = issuer.audience or settings.OPENWOP_PUBLIC_URL
    description = f"Authorization: Bearer <access token from {issuer.issuer}, audience {audience}>."
    if issuer.lane == "oidc":
        return {
            "openIdConnectSecurityScheme": {
                "openIdConnectUrl": issuer.issuer + "/.well-known/openid-configuration",
                "description": description,
            }
        }
    metadata = issuer.metadata if isinstance(issuer.metadata, dict) else {}
    authorization_url, token_url = metadata.get("authorization_endpoint"), metadata.get("token_endpoint")
    if not (isinstance(authorization_url, str) and authorization_url and isinstance(token_url, str) and token_url):
        logger.warning("card: oauth2 issuer %s left out: its metadata names no authorization/token endpoint",
                       issuer.issuer)  # fmt: skip
        return None
    families: dict[str, list[str]] = {}
    for family, scopes in (issuer.required_scopes or {}).items():
        for scope in scopes if isinstance(scopes, list) else []:
            families.setdefault(str(scope), []).append(str(family))
    return {
        "oauth2SecurityScheme": {
            "description": description,
            "flows": {
                "authorizationCode": {
                    "authorizationUrl": authorization_url,
                    "tokenUrl": token_url,
                    "pkceRequired": True,
                    "scopes": {scope: "Required for " + ", ".join(sorted(f)) for scope, f in sorted(families.items())},
                }
            },
            "oauth2MetadataUrl": issuer.issuer + "/.well-known/oauth-authorization-server",
        }
    }


def security_of(issuers: Sequence[TrustedIssuer]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(`securitySchemes`, `securityRequirements`): the API-key bearer scheme, and one scheme per
    enabled trusted issuer (issue 25), each an alternative requirement listing the scopes its
    tokens need on this door (the issuer's `a2a` family)."""
    schemes: dict[str, Any] = {
        BEARER_SCHEME: {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "bearerFormat": "OpenWOP API key",
                "description": "Authorization: Bearer <api key>; the key's tenant and subject are the caller.",
            }
        }
    }
    requirements: list[dict[str, Any]] = [{"schemes": {BEARER_SCHEME: {"list": []}}}]
    for issuer in issuers:
        scheme = _oauth_scheme(issuer)
        if scheme is None:
            continue
        name = _scheme_name(issuer)
        schemes[name] = scheme
        a2a_scopes = (issuer.required_scopes or {}).get("a2a")
        listed = [str(s) for s in a2a_scopes] if isinstance(a2a_scopes, list) else []
        requirements.append({"schemes": {name: {"list": listed}}})
    return schemes, requirements


def public_card(*, features: A2AFeatures, routes: list[SkillRoute], issuers: Sequence[TrustedIssuer] = ()) -> AgentCard:
    base = settings.OPENWOP_PUBLIC_URL
    security_schemes, security_requirements = security_of(issuers)
    interfaces = [
        {"url": base + path, "protocolBinding": binding, "protocolVersion": version}
        for version in _ordered_versions(features)
        for binding, path in (("JSONRPC", JSONRPC_PATH), ("HTTP+JSON", REST_PATH))
    ]
    grpc_url = grpc_interface_url()
    if grpc_url is not None:  # after JSON-RPC and HTTP+JSON: a client preferring the card's order keeps them
        interfaces += [
            {"url": grpc_url, "protocolBinding": "GRPC", "protocolVersion": version}
            for version in _ordered_versions(features)
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
        "securitySchemes": security_schemes,
        "securityRequirements": security_requirements,
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
    entry may not carry (no prompt, no handoff schema; `degraded[]` stays on the entry). Its
    interfaces are the host card's at or above the agent's effective floor."""
    assert entry.a2a_tenant is not None  # only routed agents have an R
    agent = entry.agent
    card = AgentCard()
    card.CopyFrom(host_card)
    card.name = agent.persona
    card.version = agent.pack_version
    card.description = agent.description or agent.label or agent.persona
    for interface in card.supported_interfaces:
        interface.tenant = entry.a2a_tenant
    _interfaces_at_or_above_floor(card, entry)
    del card.skills[:]
    for workflow in entry.workflows:
        card.skills.add(
            id=workflow.workflow_id,
            name=workflow.name or workflow.workflow_id,
            description=workflow.description or workflow.name or workflow.workflow_id,
            tags=["workflow"],
        )
    return card


def _interfaces_at_or_above_floor(card: AgentCard, entry: InventoryEntry) -> None:
    """An agent's card lists only the versions the agent accepts: its interfaces below its
    effective a2a floor (host, tenant and agent policies; apps/facets/policy.py) are dropped. The
    host's public card keeps every offered version."""
    host_floor = facet_cached(protocol="a2a").minimum_version
    floor = agent_floor(protocol="a2a", agent=entry.agent, host_floor=host_floor, tenant_slug=entry.agent.tenant.slug)
    if not is_valid_version("a2a", floor):
        return
    interfaces = card.supported_interfaces
    for index in reversed(range(len(interfaces))):
        version = interfaces[index].protocol_version
        if is_valid_version("a2a", version) and version_key("a2a", version) < version_key("a2a", floor):
            del interfaces[index]


def public_card_current() -> tuple[AgentCard, list[SkillRoute], Facet]:
    skill_routes_ensure()
    facet = facet_ensure(protocol="a2a")
    routes = skill_routes_enabled()
    card = public_card(features=features_of(facet), routes=routes, issuers=trusted_issuers())
    return card, routes, facet


# ---------------------------------------------------------------------------------------------
# Cached for the doors' hot path (apps/core/invalidation.py, topic "card"): any write to the
# facets, skill routes, agents, workflows or tenants tables empties these in every process. What
# is process-local and not in a table (served surfaces, the public origin, the host version) is
# part of the key instead.


class CardDocument(NamedTuple):
    """The public card as served: its bytes, their ETag and the Last-Modified instant (POSIX)."""

    body: bytes
    etag: str
    last_modified: float


def card_document_of(card: AgentCard, routes: list[SkillRoute], facet: Facet) -> CardDocument:
    """The served form of the public card: signed by the active key (if any), canonical JSON, a
    content ETag (a new key is new bytes), and the newest change of its sources as Last-Modified."""
    body = json.dumps(to_wire(card_sign(card)), sort_keys=True, separators=(",", ":")).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    key = card_signing_key_active()
    signed_since = [key.activated_at] if key is not None and key.activated_at is not None else []
    pin = skill_route_pin_current()
    pinned_since = [pin.pinned_at] if pin is not None else []  # a pin (or unpin) changes the skills
    changed = max([facet.updated_at, *(route.updated_at for route in routes), *signed_since, *pinned_since])
    return CardDocument(body=body, etag=etag, last_modified=changed.timestamp())


def _card_key(kind: str, *parts: Hashable) -> Hashable:
    served = tuple(
        surfaces.is_served(name)
        for name in (surfaces.A2A_STREAMING, surfaces.A2A_PUSH, surfaces.A2A_DURABLE_TASKS, surfaces.A2A_AGENT_CARDS)
    )
    origins = (settings.OPENWOP_PUBLIC_URL, grpc_interface_url())
    return (kind, *origins, settings.SPECTACULAR_SETTINGS["VERSION"], served, *parts)


def _card_document_build() -> CardDocument:
    return card_document_of(*public_card_current())


def card_document_cached() -> CardDocument:
    """`GET a2a.agentCardUrl`'s body, ETag and Last-Modified, built once per change."""
    return cached(TOPIC_CARD, _card_key("document"), _card_document_build)


async def acard_document_cached() -> CardDocument:
    """`card_document_cached` from the event loop: a hit awaits nothing; a miss builds on a thread."""
    return await acached(TOPIC_CARD, _card_key("document"), sync_to_async(_card_document_build))


def _cached_card(build: Callable[[], AgentCard], kind: str, *parts: Hashable) -> AgentCard:
    """The card kept under (`kind`, `parts`), built once per change. Each caller gets its own copy:
    callers may change their card, the cached one stays as built."""
    private = AgentCard()
    private.CopyFrom(cached(TOPIC_CARD, _card_key(kind, *parts), build))
    return private


def public_card_cached() -> AgentCard:
    """`public_card_current()`'s card, built once per change."""
    return _cached_card(lambda: public_card_current()[0], "public")


class _NoSuchAgent(Exception):
    """No agent of the caller's has this routing value: nothing to cache (only found cards are)."""


def agent_card_cached(*, subject: Subject, a2a_tenant: str) -> AgentCard | None:
    """The per-agent card the caller's `tenant: R` names (`agent_card` of its inventory entry),
    or None for every R outside the caller's inventory (interop.md §Per-agent cards), which is
    never cached. Keyed by the caller's tenant: R is only ever looked up in its own inventory."""

    def build() -> AgentCard:
        entry = agent_by_a2a_tenant(subject=subject, a2a_tenant=a2a_tenant)
        if entry is None:
            raise _NoSuchAgent
        return agent_card(host_card=public_card_cached(), entry=entry)

    try:
        return _cached_card(build, "agent", subject.tenant, a2a_tenant)
    except _NoSuchAgent:
        return None


def served_card_cached(*, subject: Subject, entry: InventoryEntry | None) -> AgentCard:
    """GetExtendedAgentCard's answer, signed (apps/a2a/signing.py) once per card version: the
    agent's card for the entry the caller's `tenant: R` resolved to, else the host card. Keyed by
    the caller's tenant and R, as `agent_card_cached` (the entry is resolved in that inventory)."""
    if entry is None:
        return _cached_card(lambda: card_sign(public_card_cached()), "served-host")
    assert entry.a2a_tenant is not None  # only routed agents have an R

    def signed() -> AgentCard:
        return card_sign(agent_card(host_card=public_card_cached(), entry=entry))

    return _cached_card(signed, "served-agent", subject.tenant, entry.a2a_tenant)
