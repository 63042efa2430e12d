"""Operator admin pages beyond the changelists: the per-agent card preview is the served card, the
facet preview commits nothing, and actions without an audit table of their own leave a LogEntry."""

from __future__ import annotations

import html
import json

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

from apps.a2a.services import card_key_activate, card_key_generate
from apps.agents.services import agent_create, agent_publish, workflow_fixtures_seed
from apps.facets.admin import served_documents_after
from apps.facets.models import Facet, FacetChange
from apps.facets.services import facet_ensure
from apps.tenants.models import ApiKey
from apps.tenants.services import api_key_create, tenant_get_or_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def test_agent_change_page_previews_the_served_card(operator_client: Client) -> None:
    facet_ensure(protocol="a2a")
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    agent = agent_create(
        tenant=tenant, actor="t", agent_id="helper", persona="Helpful Hal", roster=["conformance-noop"]
    )
    url = f"/admin/agents/agent/{agent.pk}/change/"
    assert b"No card is served" in operator_client.get(url).content  # unpublished: invisible everywhere
    agent_publish(agent=agent, actor="t")
    page = operator_client.get(url).content.decode()
    assert 'class="agent-card-preview"' in page and "Helpful Hal" in page and "conformance-noop" in page


@pytest.mark.django_db(transaction=True)  # the key services commit durably
def test_card_previews_show_the_signature_once_a_key_is_active(operator_client: Client) -> None:
    facet_ensure(protocol="a2a")
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    agent = agent_create(tenant=tenant, actor="t", agent_id="helper", persona="Hal", roster=["conformance-noop"])
    agent_publish(agent=agent, actor="t")
    url = f"/admin/agents/agent/{agent.pk}/change/"
    assert "signatures" not in html.unescape(operator_client.get(url).content.decode())
    key = card_key_activate(key_pk=card_key_generate(algorithm="EdDSA", actor="t").pk, actor="t")
    page = html.unescape(operator_client.get(url).content.decode())
    assert '"signatures"' in page and '"protected"' in page  # the per-agent card as served: signed
    facet_page = admin.site._registry[Facet]  # the facet page's preview
    [signature] = served_documents_after("a2a", {}, "t", agent_card=facet_page.served_card)["agentCard"]["signatures"]
    assert signature["protected"] and signature["signature"]
    assert key.kid in html.unescape(operator_client.get("/admin/a2a/cardsigningkey/").content.decode())


def test_facet_preview_returns_errors_or_documents_and_commits_nothing(operator_client: Client) -> None:
    facet = facet_ensure(protocol="mcp")
    form = {
        "versions": json.dumps(["2026-07-28", "2025-11-25"]),
        "preferred_version": "2025-11-25",
        "minimum_version": "2026-07-28",
        "profiles": json.dumps(["mcp-2026-07-28"]),
        "refresh_window_days": "30",
        "features": json.dumps(facet.features),
        "server_paths": json.dumps(facet.server_paths),
        "transports": json.dumps(facet.transports),
        "mrtr_max_rounds": "4",
    }
    refused = operator_client.post("/admin/facets/facet/mcp/preview/", form).json()
    assert "above the preferred revision" in " ".join(refused["errors"]["minimum_version"])
    form["minimum_version"] = "2025-11-25"
    ok = operator_client.post("/admin/facets/facet/mcp/preview/", form).json()
    assert ok["errors"] == {} and ok["discovery"]["mcp"]["preferredVersion"] == "2025-11-25"
    assert Facet.objects.get(protocol="mcp").preferred_version == "2026-07-28"
    assert not FacetChange.objects.exclude(actor="system:defaults").exists()
    assert operator_client.get("/admin/facets/facet/mcp/preview/").status_code == 405


def test_revoking_keys_in_the_admin_is_logged(operator_client: Client) -> None:
    key, _ = api_key_create(tenant=tenant_get_or_create(slug="acme")[0])
    response = operator_client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [str(key.pk)]}
    )
    assert response.status_code == 302
    assert ApiKey.unscoped_all_tenants.get(pk=key.pk).revoked_at is not None
    entry = LogEntry.objects.get(object_id=str(key.pk))
    assert entry.user.username == "root" and "Revoked" in entry.get_change_message()


def test_operators_create_console_users_in_the_admin(operator_client: Client) -> None:
    from apps.console.models import TenantMembership

    tenant = tenant_get_or_create(slug="acme")[0]
    response = operator_client.post(
        "/admin/console/tenantmembership/add/",
        {"tenant": str(tenant.pk), "username": "tess", "password": "tess-password-123"},
    )
    assert response.status_code == 302, response.content
    membership = TenantMembership.objects.get(user__username="tess")
    assert membership.tenant == tenant and membership.user.check_password("tess-password-123")
    assert LogEntry.objects.filter(object_id=str(membership.pk)).exists()
    # A staff account cannot become a console user: the form says why, nothing is created.
    refused = operator_client.post(
        "/admin/console/tenantmembership/add/", {"tenant": str(tenant.pk), "username": "root", "password": ""}
    )
    assert refused.status_code == 200 and "staff account" in refused.content.decode()
    assert not TenantMembership.objects.filter(user__username="root").exists()
