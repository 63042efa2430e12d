"""The conformance profile: put a host into the shape the OpenWOP conformance suite measures, and
take it out again (openwop-v2 reference (g); docs/contributors/conformance.md).

Apply:
- the A2A interface routes exactly `conformance-approval` (a `SkillRoutePin`: the routing table
  itself is not touched, so clear gives every route back exactly as it was);
- the suite's tenant and a second tenant exist with every fixture of the contract, each with a
  fresh API key of its own (the previous profile keys are revoked: one live pair at a time);
- the conformance agent pack: the resolver and the relay in the suite's tenant, the escalator in
  the second tenant only (the per-agent card legs need an agent only tenant B has);
- the peer bindings the fixtures name: MCP `conformance` (the suite's fake server) and
  `conformance-down` (an address nothing answers), A2A `conformance` (the suite's fake peer).

Refused while the conformance seams are off: the suite drives them, and a profile that cannot be
measured would only look like one. Both directions are audited (`ProfileChange`, append-only) and
idempotent: applying twice leaves the same shape (with new keys), clearing twice changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from apps.a2a.selectors import skill_route_pin_current
from apps.a2a.services import skill_route_pin, skill_route_unpin
from apps.agents.fixtures import CONFORMANCE_PACK_AGENTS
from apps.agents.models import Agent
from apps.agents.services import agent_create, agent_publish, agent_unpublish, agent_update
from apps.conformance.models import ProfileAction, ProfileChange
from apps.core.errors import ValidationFailed
from apps.peers.seams import conformance_seams_on
from apps.peers.services import peer_binding_set
from apps.tenants.hooks import run_tenant_created_hooks
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_create, api_key_revoke, tenant_get_or_create

PINNED_SKILL = "conformance-approval"  # the skill the operation-map, card and push legs invoke
KEY_LABEL = "conformance profile"  # the profile's keys, revoked by the next apply and by clear
DEFAULT_TENANT = "conformance"
DEFAULT_TENANT_B = "conformance-b"
MCP_SERVER_ID = "conformance"
MCP_DOWN_SERVER_ID = "conformance-down"
A2A_PEER_ID = "conformance"
# Where each tenant's pack agents come from (CONFORMANCE_PACK_AGENTS): the escalator only in B.
AGENTS_OF = {"tenant": ("resolver", "relay"), "tenant_b": ("escalator",)}
_PACK_FIELDS = (
    "persona",
    "label",
    "description",
    "pack_version",
    "roster",
    "pack_name",
    "system_prompt",
    "handoff_schemas",
)


class ProfileRefused(Exception):
    """The profile cannot be applied on this host (the message says why)."""


@dataclass(frozen=True)
class ProfileApplied:
    tenant: str
    tenant_b: str
    api_key: str
    api_key_b: str
    agent_b_id: str
    bindings: dict[str, str] = field(default_factory=dict)


def profile_state() -> ProfileChange | None:
    """The newest apply, while the profile is applied; None when it is not."""
    last = ProfileChange.objects.order_by("-at", "-id").first()
    return last if last is not None and last.action == ProfileAction.APPLY else None


def _profile_keys_revoke(tenant: Tenant) -> list[str]:
    keys = list(ApiKey.objects.for_tenant(tenant).filter(label=KEY_LABEL, revoked_at__isnull=True))
    for key in keys:
        api_key_revoke(api_key=key)
    return [key.prefix for key in keys]


def _pack_agent_ensure(*, tenant: Tenant, role: str, actor: str) -> Agent:
    """The pack agent as the pack defines it, published (created, or brought back to the pack)."""
    spec = CONFORMANCE_PACK_AGENTS[role]
    agent = Agent.objects.for_tenant(tenant).filter(agent_id=spec["agent_id"]).first()
    if agent is None:
        fields = {k: spec[k] for k in _PACK_FIELDS}
        agent = agent_create(tenant=tenant, actor=actor, agent_id=spec["agent_id"], published=True, **fields)
    else:
        agent = agent_update(agent=agent, actor=actor, changes={k: spec[k] for k in _PACK_FIELDS})
    return agent_publish(agent=agent, actor=actor)


def profile_apply(
    *,
    actor: str,
    mcp_server_url: str,
    mcp_down_url: str,
    a2a_peer_url: str,
    tenant: str = DEFAULT_TENANT,
    tenant_b: str = DEFAULT_TENANT_B,
) -> ProfileApplied:
    if not conformance_seams_on():
        raise ProfileRefused(
            "The conformance seams are off on this host (OPENWOP_CONFORMANCE_SEAMS): the suite drives "
            "them, so the profile is not applied. Start the host with OPENWOP_CONFORMANCE_SEAMS=1 "
            "(never in production)."
        )
    if tenant == tenant_b:
        raise ProfileRefused("The second tenant must be another tenant than the suite's (--tenant-b).")
    bindings = {
        f"mcp:{MCP_SERVER_ID}": mcp_server_url,
        f"mcp:{MCP_DOWN_SERVER_ID}": mcp_down_url,
        f"a2a:{A2A_PEER_ID}": a2a_peer_url,
    }
    applied = profile_state()
    current = skill_route_pin_current()
    # Re-applied: what was routed before the FIRST apply is what clear must give back.
    if applied is not None:
        pinned_before = applied.pinned_before
    else:
        pinned_before = current.route.workflow_id if current is not None else ""
    try:
        with transaction.atomic(durable=True):
            slugs = (("tenant", tenant), ("tenant_b", tenant_b))
            rows = {role: tenant_get_or_create(slug=slug)[0] for role, slug in slugs}
            revoked: dict[str, list[str]] = {}
            raw: dict[str, str] = {}
            for role, row in rows.items():
                revoked[role] = _profile_keys_revoke(row)
                _, raw[role] = api_key_create(tenant=row, label=KEY_LABEL)
                for name, url in bindings.items():
                    protocol, binding_id = name.split(":", 1)
                    peer_binding_set(tenant=row, protocol=protocol, binding_id=binding_id, url=url)
            ProfileChange.objects.create(
                actor=actor,
                action=ProfileAction.APPLY,
                tenant=tenant,
                tenant_b=tenant_b,
                pinned_before=pinned_before,
                details={
                    "pinned": PINNED_SKILL,
                    "bindings": bindings,
                    "agents": {
                        role: [CONFORMANCE_PACK_AGENTS[a]["agent_id"] for a in AGENTS_OF[role]] for role in rows
                    },
                    "keysRevoked": revoked,
                    "keyPrefixes": {role: value.partition("_")[2].partition(".")[0] for role, value in raw.items()},
                },
            )
    except ValidationFailed as exc:
        raise ProfileRefused(exc.message) from exc
    for row in rows.values():
        run_tenant_created_hooks(row.pk)  # every fixture workflow and the demo agent, idempotently
    skill_route_pin(workflow_id=PINNED_SKILL, actor=actor)
    for role, row in rows.items():
        for agent_role in AGENTS_OF[role]:
            _pack_agent_ensure(tenant=row, role=agent_role, actor=actor)
    return ProfileApplied(
        tenant=tenant,
        tenant_b=tenant_b,
        api_key=raw["tenant"],
        api_key_b=raw["tenant_b"],
        agent_b_id=CONFORMANCE_PACK_AGENTS[AGENTS_OF["tenant_b"][0]]["agent_id"],
        bindings=bindings,
    )


def profile_clear(*, actor: str) -> ProfileChange | None:
    """Take the host out of the profile: the routing choice exactly as before the first apply, the
    pack agents unpublished, the profile's keys revoked. None (and no audit row) when the profile
    is not applied. Tenants, fixtures and bindings stay: data, inert without the profile's keys."""
    applied = profile_state()
    if applied is None:
        return None
    tenants = {
        role: Tenant.objects.filter(slug=slug).first()
        for role, slug in (("tenant", applied.tenant), ("tenant_b", applied.tenant_b))
    }
    with transaction.atomic(durable=True):
        revoked = {role: _profile_keys_revoke(row) for role, row in tenants.items() if row is not None}
        change = ProfileChange.objects.create(
            actor=actor,
            action=ProfileAction.CLEAR,
            tenant=applied.tenant,
            tenant_b=applied.tenant_b,
            pinned_before=applied.pinned_before,
            details={"keysRevoked": revoked, "restoredPin": applied.pinned_before},
        )
    if applied.pinned_before:
        skill_route_pin(workflow_id=applied.pinned_before, actor=actor)
    else:
        skill_route_unpin(actor=actor)
    for role, row in tenants.items():
        if row is None:
            continue
        for agent_role in AGENTS_OF[role]:
            agent_id = CONFORMANCE_PACK_AGENTS[agent_role]["agent_id"]
            agent = Agent.objects.for_tenant(row).filter(agent_id=agent_id).first()
            if agent is not None:
                agent_unpublish(agent=agent, actor=actor)
    return change
