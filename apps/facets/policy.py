"""Version policy (issue 24): a tenant's and an agent's own floor per protocol, and the effective floor.

The host facet's `minimumVersion` / `minimumRevision` is the floor for everybody (interop.md §The
floor). A tenant may raise it for its own exchanges, and an agent of the tenant may raise it again
for the exchanges that target that agent; neither may lower it. The effective floor of an exchange
is the strictest (by `version_key`) of the host floor, the tenant's policy and, when the exchange
targets an agent, the agent's policy. A scheduled floor (policy or facet) takes effect when the beat
job `facets.apply_scheduled_floors` applies it.

The doors read a tenant's policies on every exchange, so they come from the per-process cache
(apps/core/invalidation.py, topic `facet`): any write to facets_versionpolicy empties it in every
process. On a hit the event loop awaits nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.core.invalidation import TOPIC_FACET, acached, cached
from apps.core.protocol_versions import GRAMMAR, NOUN, Protocol, is_valid_version, version_key
from apps.facets.models import Facet, VersionPolicy

if TYPE_CHECKING:
    from apps.agents.models import Agent
    from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

FLOOR_FIELD = {"a2a": "minimumVersion", "mcp": "minimumRevision"}


@dataclass(frozen=True, slots=True)
class TenantFloors:
    """One tenant's policies as the doors read them: immutable, shared by every reader."""

    tenant: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # protocol -> floor
    agents: Mapping[tuple[str, int], str] = field(default_factory=lambda: MappingProxyType({}))  # (protocol, pk)

    def floor_of(self, protocol: Protocol, agent_pk: int | None) -> tuple[str, str]:
        """(the tenant's floor, the agent's floor); "" where that level has none."""
        agent = self.agents.get((protocol, agent_pk), "") if agent_pk is not None else ""
        return self.tenant.get(protocol, ""), agent


NO_FLOORS = TenantFloors()


def strictest(protocol: Protocol, *floors: str) -> str:
    """The highest of `floors` by the protocol's order; empty and invalid values are ignored (the
    services never store an invalid one; a hand-edited row must not break every exchange)."""
    best = ""
    for floor in floors:
        if not floor:
            continue
        if not is_valid_version(protocol, floor):
            logger.warning("ignoring an invalid %s floor %r in a version policy", protocol, floor)
            continue
        if not best or version_key(protocol, floor) > version_key(protocol, best):
            best = floor
    return best


def effective_floor(*, protocol: Protocol, host_floor: str, floors: TenantFloors | None, agent_pk: int | None) -> str:
    """The strictest of the host floor, the tenant's and (when targeted) the agent's."""
    if floors is None:
        return host_floor
    tenant_floor, agent_floor = floors.floor_of(protocol, agent_pk)
    return strictest(protocol, host_floor, tenant_floor, agent_floor) or host_floor


def tenant_floors_load(tenant_slug: str) -> TenantFloors:
    tenant: dict[str, str] = {}
    agents: dict[tuple[str, int], str] = {}
    rows = VersionPolicy.objects.filter(tenant__slug=tenant_slug).exclude(minimum_version="")
    for protocol, agent_pk, minimum in rows.values_list("protocol", "agent_id", "minimum_version"):
        if agent_pk is None:
            tenant[protocol] = minimum
        else:
            agents[(protocol, agent_pk)] = minimum
    if not tenant and not agents:
        return NO_FLOORS
    return TenantFloors(tenant=MappingProxyType(tenant), agents=MappingProxyType(agents))


def _key(tenant_slug: str) -> tuple[str, str]:
    return ("policy", tenant_slug)


def tenant_floors_cached(*, tenant_slug: str) -> TenantFloors:
    """A tenant's policies from this process's cache (topic `facet`; see the module docstring)."""
    return cached(TOPIC_FACET, _key(tenant_slug), lambda: tenant_floors_load(tenant_slug))


async def atenant_floors_cached(*, tenant_slug: str) -> TenantFloors:
    """`tenant_floors_cached` from the event loop: a hit awaits nothing; a miss reads on a thread."""
    return await acached(TOPIC_FACET, _key(tenant_slug), lambda: sync_to_async(tenant_floors_load)(tenant_slug))


def agent_floor(*, protocol: Protocol, agent: Agent, host_floor: str, tenant_slug: str) -> str:
    """The effective floor of the exchanges that target `agent` (its card lists only versions at or
    above it)."""
    floors = tenant_floors_cached(tenant_slug=tenant_slug)
    return effective_floor(protocol=protocol, host_floor=host_floor, floors=floors, agent_pk=agent.pk)


# ---------------------------------------------------------------------------------------------
# Validation: the service, the admin form (VersionPolicyAdmin.instance_check) and the command share it.


def schedule_fields(row: Facet | VersionPolicy) -> dict[str, Any]:
    """A facet's or a policy's scheduled floor as its audit rows record it (JSON)."""
    at = row.scheduled_at
    return {"scheduled_minimum_version": row.scheduled_minimum_version, "scheduled_at": at and at.isoformat()}


def policy_fields(policy: VersionPolicy | None) -> dict[str, Any] | None:
    """A policy as its audit rows record it (JSON)."""
    if policy is None:
        return None
    return {"minimum_version": policy.minimum_version, **schedule_fields(policy)}


def _looser(protocol: Protocol, floor: str, than: str) -> bool:
    return bool(floor and than) and version_key(protocol, floor) < version_key(protocol, than)


def version_policy_errors(
    *,
    tenant: Tenant,
    agent: Agent | None,
    protocol: Protocol,
    minimum: str,
    scheduled_minimum: str,
    scheduled_at: dt.datetime | None,
    host: Facet,
    now: dt.datetime | None = None,
) -> dict[str, list[str]]:
    """Every problem with a policy, keyed by model field name; empty when valid. Each message
    names the rule and the floors by name, e.g. "The tenant floor 2025-11-25 is looser than the
    host floor 2026-07-28 (mcp minimumRevision).\""""
    errors: dict[str, list[str]] = defaultdict(list)
    level = "agent" if agent is not None else "tenant"
    noun, field_name = NOUN[protocol], f"{protocol} {FLOOR_FIELD[protocol]}"
    if agent is not None and agent.tenant_id != tenant.pk:
        errors["agent"].append(f"The agent {agent.agent_id} is not an agent of tenant {tenant.slug}.")
        return dict(errors)
    tenant_floor = ""
    if agent is not None:
        tenant_policy = VersionPolicy.objects.filter(tenant=tenant, agent__isnull=True, protocol=protocol).first()
        tenant_floor = tenant_policy.minimum_version if tenant_policy is not None else ""
    host_floor = host.minimum_version if is_valid_version(protocol, host.minimum_version) else ""

    def check(field: str, value: str, label: str) -> None:
        if not value:
            return
        if not is_valid_version(protocol, value):
            errors[field].append(
                f"The {label} {value!r} is not a valid {protocol.upper()} {noun}: use {GRAMMAR[protocol]}."
            )
            return
        if _looser(protocol, value, host_floor):
            errors[field].append(f"The {label} {value} is looser than the host floor {host_floor} ({field_name}).")
        if _looser(protocol, value, tenant_floor):
            errors[field].append(f"The {label} {value} is looser than the tenant floor {tenant_floor} ({field_name}).")
        # As the host floor (interop.md §The facets): an exchange naming no version is served the
        # preferred one, which no floor may refuse.
        if _looser(protocol, preferred, value):
            errors[field].append(
                f"The {label} {value} is above the host's preferred {noun} {preferred}: "
                f"an exchange naming no {noun} would be refused."
            )

    preferred = host.preferred_version if is_valid_version(protocol, host.preferred_version) else ""
    check("minimum_version", minimum, f"{level} floor")
    check("scheduled_minimum_version", scheduled_minimum, f"scheduled {level} floor")
    if bool(scheduled_minimum) != (scheduled_at is not None):
        errors["scheduled_at"].append("A scheduled floor needs both a version and the date it takes effect.")
    elif scheduled_at is not None and scheduled_at <= (now or timezone.now()):
        errors["scheduled_at"].append(f"The scheduled date {scheduled_at.isoformat()} is not in the future.")
    return dict(errors)


def errors_message(errors: Mapping[str, list[str]]) -> str:
    return " ".join(message for messages in errors.values() for message in messages)


# ---------------------------------------------------------------------------------------------
# Reads for the console's notice (apps/console)


@dataclass(frozen=True, slots=True)
class ScheduledFloor:
    """A floor that will bind some of a tenant's exchanges from `at` on: the host's (`agent_id`
    None, level "host"), the tenant's ("tenant") or one of its agents' ("agent")."""

    protocol: Protocol
    level: str
    floor: str
    at: dt.datetime
    agent_id: str | None = None


def scheduled_floors_of_tenant(*, tenant: Tenant, now: dt.datetime | None = None) -> list[ScheduledFloor]:
    """The floors scheduled after `now` that will raise what the tenant's exchanges are held to:
    the tenant's and its agents' scheduled policies, and a scheduled host floor above the tenant's
    current floor (below it, nothing changes for this tenant). Soonest first."""
    now = now or timezone.now()
    found: list[ScheduledFloor] = []
    tenant_floor = dict(
        VersionPolicy.objects.filter(tenant=tenant, agent__isnull=True).values_list("protocol", "minimum_version")
    )
    for facet in Facet.objects.filter(scheduled_at__gt=now):
        protocol: Protocol = facet.protocol  # type: ignore[assignment]
        assert facet.scheduled_at is not None
        current = strictest(protocol, facet.minimum_version, tenant_floor.get(protocol, ""))
        scheduled = facet.scheduled_minimum_version
        if is_valid_version(protocol, scheduled) and (
            not current or version_key(protocol, scheduled) > version_key(protocol, current)
        ):
            found.append(ScheduledFloor(protocol, "host", scheduled, facet.scheduled_at))
    policies = VersionPolicy.objects.filter(tenant=tenant, scheduled_at__gt=now).select_related("agent")
    for policy in policies:
        assert policy.scheduled_at is not None
        if not is_valid_version(policy.protocol, policy.scheduled_minimum_version):  # type: ignore[arg-type]
            continue
        agent_id = policy.agent.agent_id if policy.agent is not None else None
        level = "agent" if agent_id is not None else "tenant"
        found.append(
            ScheduledFloor(
                policy.protocol,  # type: ignore[arg-type]
                level,
                policy.scheduled_minimum_version,
                policy.scheduled_at,
                agent_id,
            )
        )
    return sorted(found, key=lambda s: (s.at, s.protocol, s.level))
