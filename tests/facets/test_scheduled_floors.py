"""Scheduled floors (issue 24): the beat job `facets.apply_scheduled_floors` applies a policy's or
the host facet's scheduled floor on its date, audited, idempotently; before the date nothing moves."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from apps.agents.services import agent_create
from apps.facets.models import Facet, FacetChange, VersionPolicy, VersionPolicyChange
from apps.facets.negotiation import negotiation_precheck
from apps.facets.services import (
    facet_ensure,
    facet_floor_schedule,
    facet_update,
    scheduled_floors_apply,
    version_policy_set,
)
from apps.facets.tasks import facets_apply_scheduled_floors
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db

OLDEST, OLD, NEW = "2025-06-18", "2025-11-25", "2026-07-28"


@pytest.fixture
def acme() -> Tenant:
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD, OLDEST], "minimum_version": OLDEST}, actor="test")
    return tenant_get_or_create(slug="acme")[0]


def _run_task(now: dt.datetime) -> int:
    return int(facets_apply_scheduled_floors.apply(kwargs={"now": now.isoformat()}).get())


def test_the_job_is_on_the_beat_schedule() -> None:
    entries = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "facets.apply_scheduled_floors"]
    assert len(entries) == 1 and float(entries[0]["schedule"]) <= 60


def test_a_scheduled_tenant_floor_applies_on_its_date_and_is_audited(acme: Tenant) -> None:
    at = timezone.now() + dt.timedelta(days=7)
    version_policy_set(
        tenant=acme, agent=None, protocol="mcp", minimum="", scheduled_minimum=NEW, scheduled_at=at, actor="ops"
    )

    def decided() -> tuple[str, str]:
        d = negotiation_precheck(protocol="mcp", requested=OLD, peer_offers=None, authenticated=True, tenant="acme")
        return d.outcome, d.floor

    assert decided() == ("accepted", OLDEST)
    assert _run_task(at - dt.timedelta(seconds=1)) == 0  # before the date nothing changes
    policy = VersionPolicy.objects.get()
    assert (policy.minimum_version, policy.scheduled_minimum_version, policy.scheduled_at) == ("", NEW, at)
    assert decided() == ("accepted", OLDEST)

    assert _run_task(at) == 1
    policy.refresh_from_db()
    assert (policy.minimum_version, policy.scheduled_minimum_version, policy.scheduled_at) == (NEW, "", None)
    change = VersionPolicyChange.objects.filter(actor="system:schedule").get()
    assert change.tenant_slug == "acme" and change.agent_id == "" and change.protocol == "mcp"
    assert change.before == {"minimum_version": "", "scheduled_minimum_version": NEW, "scheduled_at": at.isoformat()}
    assert change.after == {"minimum_version": NEW, "scheduled_minimum_version": "", "scheduled_at": None}
    assert decided() == ("refused", NEW)

    assert _run_task(at + dt.timedelta(days=1)) == 0  # idempotent: nothing left to apply
    assert VersionPolicyChange.objects.filter(actor="system:schedule").count() == 1


def test_a_scheduled_host_floor_applies_on_its_date(acme: Tenant) -> None:
    at = timezone.now() + dt.timedelta(hours=2)
    facet_floor_schedule(protocol="mcp", minimum=OLD, at=at, actor="ops")
    assert scheduled_floors_apply(now=at - dt.timedelta(minutes=1)) == 0
    assert Facet.objects.get(protocol="mcp").minimum_version == OLDEST

    assert scheduled_floors_apply(now=at + dt.timedelta(minutes=1)) == 1
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.minimum_version, facet.scheduled_minimum_version, facet.scheduled_at) == (OLD, "", None)
    change = FacetChange.objects.filter(actor="system:schedule").get()
    assert change.before["minimum_version"] == OLDEST and change.after["minimum_version"] == OLD
    assert change.before["scheduled_minimum_version"] == OLD and change.after["scheduled_at"] is None


def test_a_scheduled_floor_overtaken_by_a_stricter_host_floor_is_applied_as_the_stricter(acme: Tenant) -> None:
    helper = agent_create(tenant=acme, actor="test", agent_id="helper", persona="Helper", roster=[], published=True)
    at = timezone.now() + dt.timedelta(days=1)
    version_policy_set(
        tenant=acme, agent=helper, protocol="mcp", minimum="", scheduled_minimum=OLD, scheduled_at=at, actor="ops"
    )
    facet_update(protocol="mcp", changes={"minimum_version": NEW}, actor="ops")  # the host floor rose since
    assert scheduled_floors_apply(now=at) == 1  # no crash
    policy = VersionPolicy.objects.get(agent=helper)
    assert (policy.minimum_version, policy.scheduled_at) == (NEW, None)
    change = VersionPolicyChange.objects.filter(actor="system:schedule").get()
    assert change.agent_id == "helper" and change.after["minimum_version"] == NEW
    assert "applied as 2026-07-28" in change.after["scheduleAdjusted"]


def test_a_scheduled_host_floor_no_longer_offered_is_dropped_and_audited(acme: Tenant) -> None:
    at = timezone.now() + dt.timedelta(days=1)
    facet_floor_schedule(protocol="mcp", minimum=OLD, at=at, actor="ops")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLDEST]}, actor="ops")  # OLD withdrawn since
    assert scheduled_floors_apply(now=at) == 1
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.minimum_version, facet.scheduled_minimum_version, facet.scheduled_at) == (OLDEST, "", None)
    change = FacetChange.objects.filter(actor="system:schedule").get()
    assert change.after["scheduleDropped"] and "offered" in change.after["scheduleDropped"][0]
