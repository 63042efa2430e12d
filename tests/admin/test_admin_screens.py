"""The admin's loose ends (issue 32 items 9 and 10): saves through durable services answer a
redirect, not a 500; the header links nowhere dead; the index links the host pages for the staff
they admit; task messages are evidence (no delete page); lists read as people write them."""

from __future__ import annotations

import html

import pytest
from django.contrib import admin
from django.contrib.admin import ModelAdmin
from django.contrib.auth.models import User
from django.test import Client

from apps.a2a.models import TaskMessage
from apps.agents.models import AgentChange
from apps.agents.services import agent_create, workflow_fixtures_seed
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.facets.models import VersionPolicy, VersionPolicyChange
from apps.facets.services import facet_ensure, version_policy_set
from apps.runs.services import run_create
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import tenant_get_or_create
from tests.admin.html_pages import form_fields, page_links
from tests.browser import roles

AUDITOR_PAGE = "/host/openwop-host/audit/negotiations"
DEPRECATION_PAGE = "/host/openwop-host/deprecation/"


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def _post_back(client: Client, url: str, form_id: str, **changes: str) -> int:
    data: dict[str, list[str]] = {}
    for name, value in form_fields(client.get(url).content.decode(), form_id):
        data.setdefault(name, []).append(value)
    data.update({name: [value] for name, value in changes.items()})
    return client.post(url, {**data, "_save": "Save"}).status_code


def test_every_admin_that_writes_through_services_leaves_the_transaction_to_them() -> None:
    """One mechanism (apps/core/admin_service_writes.py): an admin whose saves or deletes call a
    service must not wrap them in its own transaction, or a durable service refuses (a 500)."""
    writes = ("save_model", "delete_model", "delete_queryset")
    overriding = [
        model_admin
        for model_admin in admin.site._registry.values()
        if any(getattr(type(model_admin), name) is not getattr(ModelAdmin, name) for name in writes)
    ]
    assert {"AgentAdmin", "FacetAdmin", "TrustedIssuerAdmin"} <= {type(a).__name__ for a in overriding}
    assert [type(a).__name__ for a in overriding if not isinstance(a, ServiceWritesAdminMixin)] == []


@pytest.mark.django_db(transaction=True)  # committed, as in production: the services' durable blocks are top-level
def test_editing_an_agent_saves_through_its_durable_service(operator_client: Client) -> None:
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    agent = agent_create(tenant=tenant, actor="t", agent_id="helper", persona="Hal", roster=["conformance-noop"])
    url = f"/admin/agents/agent/{agent.pk}/change/"
    assert _post_back(operator_client, url, "agent_form") == 302  # unchanged
    assert _post_back(operator_client, url, "agent_form", persona="Helpful Hal") == 302
    agent.refresh_from_db()
    assert agent.persona == "Helpful Hal"
    change = AgentChange.objects.for_tenant(tenant).filter(agent=agent).order_by("-at", "-pk").first()
    assert change is not None and change.actor == "admin:root" and change.after["persona"] == "Helpful Hal"


@pytest.mark.django_db(transaction=True)
def test_a_version_policy_is_set_and_deleted_in_the_admin_through_its_services(operator_client: Client) -> None:
    facet_ensure(protocol="a2a")
    tenant = tenant_get_or_create(slug="acme")[0]
    policy = version_policy_set(tenant=tenant, agent=None, protocol="a2a", minimum="1.0", actor="t")
    url = f"/admin/facets/versionpolicy/{policy.pk}/change/"
    assert _post_back(operator_client, url, "versionpolicy_form") == 302
    response = operator_client.post(f"/admin/facets/versionpolicy/{policy.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not VersionPolicy.objects.filter(pk=policy.pk).exists()
    assert VersionPolicyChange.objects.filter(tenant_slug="acme", actor="admin:root").exists()


@pytest.mark.django_db
def test_the_header_has_no_dead_view_site_link(operator_client: Client) -> None:
    page = operator_client.get("/admin/").content.decode()
    assert "View site" not in page
    assert "/" not in page_links(page)
    assert operator_client.get("/").status_code == 200  # the front door (issue 53 item 3), not the admin's


@pytest.mark.django_db
def test_the_index_links_the_host_pages_each_only_for_the_staff_it_admits(operator_client: Client) -> None:
    def links(client: Client) -> set[str]:
        page = client.get("/admin/").content.decode()
        section = page.split('id="host-pages"', 1)[1].split("</table>", 1)[0] if 'id="host-pages"' in page else ""
        return set(page_links(section))

    assert links(operator_client) == {AUDITOR_PAGE, DEPRECATION_PAGE}  # superuser
    for account, expected in (
        (roles.operator(), {DEPRECATION_PAGE}),
        (roles.auditor(), {AUDITOR_PAGE, DEPRECATION_PAGE}),
    ):
        client = Client()
        assert client.login(username=account.username, password=account.password)
        assert links(client) == expected, account.username
        for url in expected:
            assert client.get(url).status_code == 200  # the page agrees with the link
    plain = User.objects.create_user("sam-staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(plain)
    assert links(client) == set()


@pytest.mark.django_db
def test_task_messages_are_evidence_without_a_delete_page(operator_client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    subject = subject_from_api_key(make_key("acme"))
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="a2a")
    message = TaskMessage.objects.create(tenant=tenant, run=run, principal="p", message_id="m1", document={})
    change = operator_client.get(f"/admin/a2a/taskmessage/{message.pk}/change/").content.decode()
    assert "/delete/" not in " ".join(page_links(change))
    assert operator_client.get(f"/admin/a2a/taskmessage/{message.pk}/delete/").status_code == 403
    assert operator_client.post(f"/admin/a2a/taskmessage/{message.pk}/delete/", {"post": "yes"}).status_code == 403
    changelist = operator_client.get("/admin/a2a/taskmessage/").content.decode()
    assert "delete_selected" not in changelist
    assert TaskMessage.objects.for_tenant(tenant).count() == 1
    # The run's transport reads as the protocol spells itself.
    runs = html.unescape(operator_client.get("/admin/runs/run/").content.decode())
    assert ">A2A<" in runs and ">MCP<" in runs and "A2a" not in runs and "Mcp" not in runs


@pytest.mark.django_db
def test_the_facet_list_shows_versions_as_people_write_them(operator_client: Client) -> None:
    facet_ensure(protocol="a2a")
    facet_ensure(protocol="mcp")
    page = html.unescape(operator_client.get("/admin/facets/facet/").content.decode())
    assert '["' not in page
    assert '<td class="field-offered_versions">1.0</td>' in page
