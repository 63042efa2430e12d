"""Retention policy: the host's windows, a tenant's overrides and hold, changed only through the
audited service, from the admin and `manage.py retention`, and said in discovery (issue 36)."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, transaction
from django.test import Client
from django.utils import timezone

from apps.core.actors import os_user
from apps.core.errors import ValidationFailed
from apps.retention.models import RetentionChange, RetentionPolicy
from apps.retention.services import Retention, retention_of, retention_set, run_ttl_ms
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db


def _command(*args: str) -> str:
    out = StringIO()
    call_command("retention", *args, stdout=out)
    return out.getvalue()


def _refused(*args: str) -> str:
    with pytest.raises(CommandError) as refusal:
        _command(*args)
    assert refusal.value.returncode == 2
    return str(refusal.value)


def test_host_windows_then_overrides_then_hold(tenant: Tenant, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RUNS_DAYS, settings.OPENWOP_RETENTION_RECORDS_DAYS = 7, 60
    assert retention_of(tenant) == Retention(runs_days=7, records_days=60)
    retention_set(tenant=tenant, runs_days=14, actor="test")
    assert retention_of(tenant) == Retention(runs_days=14, records_days=60)
    retention_set(tenant=tenant, legal_hold=True, actor="test")
    held = retention_of(tenant)
    now = timezone.now()
    assert held.legal_hold and held.runs_cutoff(now) is None and held.records_cutoff(now) is None
    assert held.run_ttl_ms is None
    retention_set(tenant=tenant, runs_days=None, legal_hold=False, actor="test")
    assert retention_of(tenant).runs_cutoff(now) == now - dt.timedelta(days=7)
    assert retention_of(tenant).run_ttl_ms == 7 * 86_400_000


def test_every_change_is_audited_and_the_trail_is_append_only(tenant: Tenant) -> None:
    retention_set(tenant=tenant, runs_days=14, actor="test:a")
    retention_set(tenant=tenant, runs_days=14, actor="test:b")  # no change, no row
    retention_set(tenant=tenant, legal_hold=True, actor="test:c")
    trail = list(RetentionChange.objects.order_by("id").values_list("actor", "before", "after"))
    assert trail == [
        (
            "test:a",
            {"runs_days": None, "records_days": None, "legal_hold": False},
            {"runs_days": 14, "records_days": None, "legal_hold": False},
        ),
        (
            "test:c",
            {"runs_days": 14, "records_days": None, "legal_hold": False},
            {"runs_days": 14, "records_days": None, "legal_hold": True},
        ),
    ]
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        RetentionChange.objects.update(actor="someone else")
    with pytest.raises(ValidationFailed) as refused:
        retention_set(tenant=tenant, records_days=0, actor="test")
    assert set(refused.value.details["fields"]) == {"records_days"}
    assert RetentionChange.objects.count() == 2


def test_the_command_shows_sets_and_refuses(tenant: Tenant, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RUNS_DAYS, settings.OPENWOP_RETENTION_RECORDS_DAYS = 30, 90
    tenant_get_or_create(slug="globex")
    assert _command("show").splitlines() == [
        "host: runs 30 days after they end, records 90 days",
        "tenant acme: runs 30 days after they end, records 90 days",
        "tenant globex: runs 30 days after they end, records 90 days",
    ]
    assert _command("set", "--tenant", "acme", "--runs-days", "3", "--records-days", "400", "--actor", "ops") == (
        "tenant acme: runs 3 days after they end, records 400 days\n"
    )
    assert _command("set", "--tenant", "acme", "--legal-hold", "on") == "tenant acme: legal hold (nothing expires)\n"
    assert _command("set", "--tenant", "acme", "--legal-hold", "off", "--runs-days", "host").startswith(
        "tenant acme: runs 30 days"
    )
    assert RetentionChange.objects.filter(tenant_slug="acme").count() == 3
    actors = list(RetentionChange.objects.filter(tenant_slug="acme").order_by("id").values_list("actor", flat=True))
    assert actors == [f"cli:{os_user()} as ops", f"cli:{os_user()}", f"cli:{os_user()}"]  # who ran it, always

    assert "needs --tenant" in _refused("set", "--runs-days", "3")
    assert "number of days" in _refused("set", "--tenant", "acme", "--runs-days", "soon")
    assert "at least 1" in _refused("set", "--tenant", "acme", "--runs-days", "0")
    assert "No tenant" in _refused("show", "--tenant", "nobody")
    assert "for set" in _refused("apply", "--legal-hold", "on")
    assert "ISO 8601" in _refused("apply", "--now", "yesterday")
    future = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    assert "in the future" in _refused("apply", "--now", future)
    assert RetentionChange.objects.filter(tenant_slug="acme").count() == 3  # refusals changed nothing


def test_mcp_task_ttl_follows_the_policy_cache(tenant: Tenant, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RUNS_DAYS = 30
    assert run_ttl_ms(tenant.pk) == 30 * 86_400_000
    retention_set(tenant=tenant, runs_days=2, actor="test")
    assert run_ttl_ms(tenant.pk) == 2 * 86_400_000  # inside a transaction the cache is bypassed
    retention_set(tenant=tenant, legal_hold=True, actor="test")
    assert run_ttl_ms(tenant.pk) is None


def test_discovery_says_what_is_kept_and_for_how_long(client: Client, settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RUNS_DAYS, settings.OPENWOP_RETENTION_RECORDS_DAYS = 30, 90
    settings.OPENWOP_ARCHIVE_URL = f"file://{tmp_path}"
    advertised = client.get("/.well-known/openwop").json()["extensions"]["openwop-host.retention"]
    assert advertised == {
        "runs": {"days": 30, "from": "terminal"},
        "records": {"days": 90, "from": "written"},
        "perTenantOverrides": True,
        "legalHold": True,
        "exportBeforeExpiry": "file",
    }
    assert str(tmp_path) not in client.get("/.well-known/openwop").content.decode()


def test_the_admin_saves_through_the_audited_service(tenant: Tenant) -> None:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    added = client.post(
        "/admin/retention/retentionpolicy/add/",
        {"tenant": tenant.pk, "runs_days": "5", "records_days": "", "legal_hold": "on"},
    )
    assert added.status_code == 302, added.content
    policy = RetentionPolicy.objects.get(tenant=tenant)
    assert (policy.runs_days, policy.records_days, policy.legal_hold) == (5, None, True)
    change = RetentionChange.objects.get()
    assert change.actor == "admin:root" and change.after == {"runs_days": 5, "records_days": None, "legal_hold": True}
    for page in (
        "/admin/retention/retentionpolicy/",
        f"/admin/retention/retentionpolicy/{policy.pk}/change/",
        "/admin/retention/retentionchange/",
        f"/admin/retention/retentionchange/{change.pk}/change/",
    ):
        assert client.get(page).status_code == 200, page
    deleted = client.post(f"/admin/retention/retentionpolicy/{policy.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not RetentionPolicy.objects.exists() and RetentionChange.objects.count() == 2


def test_a_second_pass_at_once_is_refused(tenant: Tenant) -> None:
    import psycopg

    from apps.core.async_db import conninfo
    from apps.retention.services import APPLY_LOCK_KEY

    with psycopg.connect(conninfo(), autocommit=True) as other:  # another process's pass, under way
        other.execute("SELECT pg_advisory_lock(%s)", [APPLY_LOCK_KEY])
        assert "another retention pass is under way" in _refused("apply")
        other.execute("SELECT pg_advisory_unlock(%s)", [APPLY_LOCK_KEY])
    assert "runs expired: 0" in _command("apply")
