"""The console's notice of a scheduled floor (issue 24): before its date, the tenants it will bind
see the protocol, the new floor, the date, and which versions below it their callers used, since
when and from how many peers (apps.audit.deprecation rollups of the `negotiation.decided` records)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.facets.negotiation import negotiation_decide
from apps.facets.services import facet_ensure, facet_floor_schedule, facet_update, version_policy_set
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.browser.roles import PASSWORD, tenant_user

pytestmark = pytest.mark.django_db(transaction=True)  # negotiation records commit durably

OLDEST, OLD, NEW = "2025-06-18", "2025-11-25", "2026-07-28"


def _client(slug: str) -> Client:
    """A signed-in console user of `slug` (one user per tenant, created on first use)."""
    client = Client()
    username = f"{slug}-user"
    if not get_user_model().objects.filter(username=username).exists():
        tenant_user(slug, username=username)
    assert client.login(username=username, password=PASSWORD)
    return client


def _exchange(key: str, requested: str, peer: str) -> None:
    negotiation_decide(
        protocol="mcp", requested=requested, peer_origin=peer, subject=subject_from_api_key(key), run=None
    )


def _notices(page: str) -> list[str]:
    return re.findall(r'<section class="card floor-notice".*?</section>', page, flags=re.S)


def test_a_scheduled_tenant_floor_shows_who_still_uses_what_it_will_refuse(make_key) -> None:  # type: ignore[no-untyped-def]
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD, OLDEST], "minimum_version": OLDEST}, actor="t")
    acme_client, globex_client = _client("acme"), _client("globex")
    acme_key, globex_key = make_key("acme"), make_key("globex")
    assert _notices(acme_client.get("/console/").content.decode()) == []  # nothing scheduled

    _exchange(acme_key, OLD, "https://one.example")
    _exchange(acme_key, OLD, "https://two.example")
    _exchange(acme_key, OLDEST, "https://one.example")
    _exchange(acme_key, NEW, "https://three.example")  # at the new floor: not listed
    _exchange(globex_key, OLD, "https://four.example")  # another tenant's caller: not acme's business

    at = timezone.now() + dt.timedelta(days=14)
    version_policy_set(
        tenant=Tenant.objects.get(slug="acme"),
        agent=None,
        protocol="mcp",
        minimum="",
        scheduled_minimum=NEW,
        scheduled_at=at,
        actor="ops",
    )
    page = acme_client.get("/console/").content.decode()
    [notice] = _notices(page)
    assert f"MCP floor rising to {NEW} on {at:%Y-%m-%d %H:%M} UTC" in notice and "Your tenant's" in notice
    today = timezone.now().date().isoformat()
    rows = re.findall(
        r'<tr data-version="([^"]+)"><td class="mono">[^<]+</td><td>(\d+)</td><td>(\d+)</td>'
        r"<td>([\d-]+)</td><td>([\d-]+)</td></tr>",
        notice,
    )
    assert sorted(rows) == sorted([(OLDEST, "1", "1", today, today), (OLD, "2", "2", today, today)])

    # On the overview (the console's landing) only; the other tenant sees no notice of acme's policy.
    assert "floor-notice" not in acme_client.get("/console/keys/").content.decode()
    assert _notices(globex_client.get("/console/").content.decode()) == []


def test_a_scheduled_host_floor_notifies_every_tenant_it_would_bind(make_key) -> None:  # type: ignore[no-untyped-def]
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD], "minimum_version": OLD}, actor="t")
    make_key("acme")
    make_key("globex")
    version_policy_set(tenant=Tenant.objects.get(slug="globex"), agent=None, protocol="mcp", minimum=NEW, actor="t")
    facet_floor_schedule(protocol="mcp", minimum=NEW, at=timezone.now() + dt.timedelta(days=3), actor="ops")

    [notice] = _notices(_client("acme").get("/console/").content.decode())
    assert f"MCP floor rising to {NEW}" in notice and "This host's" in notice
    assert "None of your callers used a version below 2026-07-28 in the last 30 days." in notice
    # globex already holds itself to that floor: the host's schedule changes nothing for it.
    assert _notices(_client("globex").get("/console/").content.decode()) == []
