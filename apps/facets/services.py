"""Writes for facets: creation with defaults, operator edits (audited), registry re-evaluation;
version policies per tenant and agent, and scheduled floors (issue 24; rules in policy.py)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from apps.core.actors import system_actor
from apps.core.errors import ValidationFailed
from apps.core.invalidation import TOPIC_CARD, TOPIC_FACET, acached, cached, invalidate_on_commit
from apps.core.protocol_versions import Protocol
from apps.facets.models import Facet, FacetChange, FacetRefresh, VersionPolicy, VersionPolicyChange
from apps.facets.policy import errors_message, policy_fields, schedule_fields, strictest, version_policy_errors
from apps.facets.validation import facet_errors

if TYPE_CHECKING:
    from apps.agents.models import Agent
    from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

DEFAULTS_ACTOR = system_actor("defaults")  # a facet made with its defaults on first use
DEFAULTS: dict[Protocol, dict[str, Any]] = {
    "a2a": {
        "versions": ["1.0"],
        "preferred_version": "1.0",
        "minimum_version": "1.0",
        "profiles": ["a2a-1.0"],
        "refresh_window_days": 30,
        "agent_card_path": "/.well-known/agent-card.json",
        "streaming": True,
        "push_notifications": True,
        "durable_tasks": True,
        "agent_cards": True,
    },
    "mcp": {
        "versions": ["2026-07-28"],
        "preferred_version": "2026-07-28",
        "minimum_version": "2026-07-28",
        "profiles": ["mcp-2026-07-28"],
        "refresh_window_days": 30,
        "features": ["server-discover", "mrtr", "cacheable-lists", "extensions"],
        "server_paths": ["/mcp"],
        "transports": ["streamable-http", "stdio"],
        "mrtr_max_rounds": 4,
    },
}
# What operators edit: every field with a default, in the order the admin shows them.
EDITABLE_FIELDS: dict[Protocol, tuple[str, ...]] = {protocol: tuple(fields) for protocol, fields in DEFAULTS.items()}


def facet_fields(facet: Facet) -> dict[str, Any]:
    return {field: getattr(facet, field) for field in EDITABLE_FIELDS[facet.protocol]}  # type: ignore[index]


def _today() -> dt.date:
    return timezone.now().date()  # UTC: never a date in the future for any reader


def facet_ensure(*, protocol: Protocol) -> Facet:
    """The facet row, created with defaults and evaluated against the registry on first use."""
    facet = Facet.objects.filter(protocol=protocol).first()
    if facet is not None:
        return facet
    try:
        with transaction.atomic():
            facet = Facet.objects.create(protocol=protocol, **DEFAULTS[protocol])
            FacetChange.objects.create(protocol=protocol, actor=DEFAULTS_ACTOR, before=None, after=facet_fields(facet))
    except IntegrityError:  # created concurrently
        return Facet.objects.get(protocol=protocol)
    facet_refresh(protocol=protocol)
    facet.refresh_from_db()
    return facet


def facet_cached(*, protocol: Protocol) -> Facet:
    """`facet_ensure` for the doors' hot path: the row from this process's cache (created on the
    first call as `facet_ensure` creates it, only read after that). Any write to the facets table
    empties the cache in every process (apps/core/invalidation.py). Each call gets its own copy,
    so no caller can change what another thread reads."""
    return _facet_copy(cached(TOPIC_FACET, protocol, lambda: facet_ensure(protocol=protocol)))


async def afacet_cached(*, protocol: Protocol) -> Facet:
    """`facet_cached` from the event loop: a hit awaits nothing; a miss reads on a thread."""
    facet = await acached(TOPIC_FACET, protocol, lambda: sync_to_async(facet_ensure)(protocol=protocol))
    return _facet_copy(facet)


_FACET_LIST_FIELDS = ("versions", "profiles", "features", "server_paths", "transports")


def _facet_copy(facet: Facet) -> Facet:
    """A private copy of a loaded row (the JSON lists too), without `copy.copy`'s pickling path:
    it runs on every hot-path request."""
    private = Facet.__new__(Facet)
    fields = private.__dict__
    fields.update(facet.__dict__)
    fields["_state"] = ModelState()
    fields["_state"].db, fields["_state"].adding = facet._state.db, False
    for name in _FACET_LIST_FIELDS:
        fields[name] = list(fields[name])
    return private


def facet_update(*, protocol: Protocol, changes: dict[str, Any], actor: str) -> Facet:
    """Validate and apply an operator's edit; the change is audited in the same transaction."""
    unknown = set(changes) - set(EDITABLE_FIELDS[protocol])
    if unknown:
        raise ValidationFailed(f"Not {protocol} facet fields: {', '.join(sorted(unknown))}.")
    facet_ensure(protocol=protocol)
    # Not durable: the admin calls this inside its own change-form transaction.
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        before = facet_fields(facet)
        after = {**before, **changes}
        errors = facet_errors(protocol, after)
        if errors:
            raise ValidationFailed("The facet is not valid.", details={"fields": errors})
        if after == before:
            return facet
        for field, value in changes.items():
            setattr(facet, field, value)
        offered_changed = before["versions"] != after["versions"]
        if offered_changed:
            facet.refreshed_at = None  # a new offered list has not been evaluated yet
        facet.save()
        FacetChange.objects.create(protocol=protocol, actor=actor, before=before, after=after)
        # Every process drops it through the table's trigger; this one does not wait for it.
        invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
    if offered_changed:
        facet_refresh(protocol=protocol)
        facet.refresh_from_db()
    return facet


def upstream_registry() -> tuple[dict[str, Any], str]:
    path = Path(settings.OPENWOP_UPSTREAM_REGISTRY)
    return json.loads(path.read_text()), str(path)


def facet_refresh(*, protocol: Protocol, today: dt.date | None = None) -> FacetRefresh:
    """Re-evaluate the offered list against the registry; only a clean evaluation moves refreshedAt.

    A list naming versions the registry does not know keeps its old date, so it goes stale in the
    open (flagged in the admin, visible in discovery) instead of being advertised as fresh.
    """
    today = today or _today()
    try:
        registry, source = upstream_registry()
        known = set(registry.get(protocol, []))
        registry_updated = str(registry.get("updated", ""))
    except (OSError, ValueError) as exc:
        logger.error("upstream registry unreadable: %s", exc)
        known, source, registry_updated = set(), str(settings.OPENWOP_UPSTREAM_REGISTRY), ""
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        unknown = [v for v in facet.versions if v not in known]
        ok = not unknown
        if ok:
            facet.refreshed_at = today
            facet.save(update_fields=["refreshed_at"])
            invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
        else:
            logger.warning("%s facet offers versions the upstream registry does not know: %s", protocol, unknown)
        return FacetRefresh.objects.create(
            protocol=protocol,
            evaluated_on=today,
            ok=ok,
            offered=list(facet.versions),
            unknown=unknown,
            registry_source=source,
            registry_updated=registry_updated,
        )


# ---------------------------------------------------------------------------------------------
# Version policy and scheduled floors (issue 24; rules in apps/facets/policy.py)

SCHEDULE_ACTOR = system_actor("schedule")  # the beat job facets.apply_scheduled_floors


def _facet_schedule_fields(facet: Facet) -> dict[str, Any]:
    """The facet as its audit rows record a floor schedule: its fields plus the schedule (JSON)."""
    return {**facet_fields(facet), **schedule_fields(facet)}


def facet_floor_schedule_errors(
    *,
    protocol: Protocol,
    facet_values: dict[str, Any],
    minimum: str,
    at: dt.datetime | None,
    now: dt.datetime | None = None,
) -> dict[str, list[str]]:
    """Every problem with scheduling the host floor `minimum` at `at` (both "" / None: cancelling)
    against the facet whose fields are `facet_values`; keyed by the facet's schedule fields. The one
    check of a schedule: `facet_floor_schedule` (so `facet_set --at`) and the admin's facet form run it."""
    if bool(minimum) != (at is not None):
        return {"scheduled_at": ["A scheduled floor needs both a version and the date it takes effect."]}
    errors: dict[str, list[str]] = {}
    if minimum:
        floor = facet_errors(protocol, {**facet_values, "minimum_version": minimum}).get("minimum_version")
        if floor:
            errors["scheduled_minimum_version"] = [e.replace("The floor", "The scheduled host floor") for e in floor]
    if at is not None and at <= (now or timezone.now()):
        errors["scheduled_at"] = [f"The scheduled date {at.isoformat()} is not in the future."]
    return errors


def facet_floor_schedule(*, protocol: Protocol, minimum: str, at: dt.datetime | None, actor: str) -> Facet:
    """Schedule (or, with `minimum` "" and `at` None, cancel) a host floor: `minimum` becomes the
    facet's minimum_version at `at`, when the beat job applies it. Validated as a floor of the
    offered list as it stands (`facet_floor_schedule_errors`); audited in the same transaction."""
    facet_ensure(protocol=protocol)
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        values = facet_fields(facet)
        errors = facet_floor_schedule_errors(protocol=protocol, facet_values=values, minimum=minimum, at=at)
        if errors:
            raise ValidationFailed(errors_message(errors), details={"fields": errors})
        before = _facet_schedule_fields(facet)
        facet.scheduled_minimum_version, facet.scheduled_at = minimum, at
        after = _facet_schedule_fields(facet)
        if after == before:
            return facet
        facet.save(update_fields=["scheduled_minimum_version", "scheduled_at", "updated_at"])
        FacetChange.objects.create(protocol=protocol, actor=actor, before=before, after=after)
        invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
    return facet


def version_policy_get(
    *, tenant: Tenant, agent: Agent | None, protocol: Protocol, locked: bool = False
) -> VersionPolicy | None:
    rows = VersionPolicy.objects.select_for_update() if locked else VersionPolicy.objects.all()
    return rows.filter(tenant=tenant, agent=agent, protocol=protocol).first()


def version_policy_set(
    *,
    tenant: Tenant,
    agent: Agent | None,
    protocol: Protocol,
    minimum: str,
    scheduled_minimum: str = "",
    scheduled_at: dt.datetime | None = None,
    actor: str,
) -> VersionPolicy:
    """Set a tenant's (agent None) or an agent's policy to exactly these values, validated
    (apps/facets/policy.py) and audited in the same transaction. Raises ValidationFailed whose
    message names every broken rule."""
    host = facet_ensure(protocol=protocol)
    # Not durable: the admin calls this inside its own change-form transaction.
    with transaction.atomic():
        policy = version_policy_get(tenant=tenant, agent=agent, protocol=protocol, locked=True)
        errors = version_policy_errors(
            tenant=tenant,
            agent=agent,
            protocol=protocol,
            minimum=minimum,
            scheduled_minimum=scheduled_minimum,
            scheduled_at=scheduled_at,
            host=host,
        )
        if errors:
            raise ValidationFailed(errors_message(errors), details={"fields": errors})
        before = policy_fields(policy)
        if policy is None:
            policy = VersionPolicy(tenant=tenant, agent=agent, protocol=protocol)
        policy.minimum_version = minimum
        policy.scheduled_minimum_version, policy.scheduled_at = scheduled_minimum, scheduled_at
        after = policy_fields(policy)
        if after == before:
            return policy
        try:
            with transaction.atomic():
                policy.save()
        except IntegrityError as exc:  # created concurrently
            raise ValidationFailed("The policy was changed concurrently: try again.") from exc
        _policy_audit(policy, actor=actor, before=before, after=after)
    return policy


def version_policy_clear(*, tenant: Tenant, agent: Agent | None, protocol: Protocol, actor: str) -> bool:
    """Remove a policy (the level then has no floor of its own); audited. False when there was none.

    Clearing a tenant's policy leaves its agents' policies as they are: each is still never looser
    than the host floor, which is all an agent's floor must respect once the tenant has none."""
    with transaction.atomic():
        policy = version_policy_get(tenant=tenant, agent=agent, protocol=protocol, locked=True)
        if policy is None:
            return False
        before = policy_fields(policy)
        policy.delete()
        policy.tenant, policy.agent = tenant, agent
        _policy_audit(policy, actor=actor, before=before, after=policy_fields(VersionPolicy()))  # no floor, no schedule
    return True


def _policy_audit(policy: VersionPolicy, *, actor: str, before: dict[str, Any] | None, after: Any) -> None:
    VersionPolicyChange.objects.create(
        tenant_slug=policy.tenant.slug,
        agent_id=policy.agent.agent_id if policy.agent is not None else "",
        protocol=policy.protocol,
        actor=actor,
        before=before,
        after=after,
    )
    # The table's trigger empties every process's caches; this one does not wait for it.
    invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)


def scheduled_floors_apply(*, now: dt.datetime) -> int:
    """Apply every scheduled floor (host facets first, then policies) whose date is at or before
    `now`: the floor moves into minimum_version, the schedule is cleared, and the change is audited
    (actor `system:schedule`), one transaction per row under its lock. Idempotent: a row already
    applied has no schedule left. A floor that has become invalid never stops the job: a policy's
    is applied as the strictest of it and the floors above it (host, tenant); a host floor that is
    no longer an offered version is dropped, its audit row saying why. Returns the rows changed."""
    changed = 0
    kinds = (
        (Facet, _facet_schedule_apply, "applying the scheduled %s host floor failed"),
        (VersionPolicy, _policy_schedule_apply, "applying the scheduled floor of version policy %s failed"),
    )
    for model, apply, failed in kinds:
        for pk in model.objects.filter(scheduled_at__lte=now).values_list("pk", flat=True):
            try:
                changed += apply(pk, now)  # type: ignore[arg-type]
            except Exception:  # one bad row never stops the others (the next run retries it)
                logger.exception(failed, pk)
    return changed


def _facet_schedule_apply(protocol: Protocol, now: dt.datetime) -> bool:
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        if facet.scheduled_at is None or facet.scheduled_at > now:
            return False  # applied (or rescheduled) meanwhile
        before = _facet_schedule_fields(facet)
        target = facet.scheduled_minimum_version
        dropped = facet_errors(protocol, {**facet_fields(facet), "minimum_version": target}).get("minimum_version")
        if not dropped:
            facet.minimum_version = target
        facet.scheduled_minimum_version, facet.scheduled_at = "", None
        facet.save(update_fields=["minimum_version", "scheduled_minimum_version", "scheduled_at", "updated_at"])
        after = _facet_schedule_fields(facet)
        if dropped:
            logger.warning("scheduled %s host floor %s dropped: %s", protocol, target, " ".join(dropped))
            after["scheduleDropped"] = dropped
        FacetChange.objects.create(protocol=protocol, actor=SCHEDULE_ACTOR, before=before, after=after)
        invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
    return True


def _policy_schedule_apply(pk: int, now: dt.datetime) -> bool:
    with transaction.atomic():
        locked = VersionPolicy.objects.select_for_update(of=("self",)).select_related("tenant", "agent")
        policy = locked.filter(pk=pk).first()
        if policy is None or policy.scheduled_at is None or policy.scheduled_at > now:
            return False
        protocol: Protocol = policy.protocol  # type: ignore[assignment]
        host_floor = Facet.objects.filter(protocol=protocol).values_list("minimum_version", flat=True).first() or ""
        tenant_floor = ""
        if policy.agent_id is not None:
            tenant_policies = VersionPolicy.objects.filter(
                tenant_id=policy.tenant_id, agent__isnull=True, protocol=protocol
            )
            tenant_floor = tenant_policies.values_list("minimum_version", flat=True).first() or ""
        before = policy_fields(policy)
        scheduled = policy.scheduled_minimum_version
        policy.minimum_version = strictest(protocol, scheduled, host_floor, tenant_floor) or policy.minimum_version
        policy.scheduled_minimum_version, policy.scheduled_at = "", None
        policy.save()
        after = policy_fields(policy) or {}
        if policy.minimum_version != scheduled:
            after["scheduleAdjusted"] = (
                f"The scheduled floor {scheduled} was applied as {policy.minimum_version}, "
                "the strictest of it and the floors above it."
            )
        _policy_audit(policy, actor=SCHEDULE_ACTOR, before=before, after=after)
    return True
