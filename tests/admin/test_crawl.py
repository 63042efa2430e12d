"""A crawl of every screen as its users reach them (issue 32, "What it must show"): signed in as a
superuser, every admin changelist, add, change and history page loads, and every change form
posted back unchanged saves with a redirect; signed in as a console user, every console page
loads; and no link on any of those pages (admin, console, auditor, deprecation) that points into
the host answers 404.

The models come from `admin.site._registry`, so a new admin is crawled without touching this file.
The database is committed (`transaction=True`): the admin's saves run as in production, where a
durable service nested in the admin's own transaction refuses (issue 32 item 9).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from apps.a2a.models import SkillRoute, TaskMessage
from apps.a2a.services import card_key_activate, card_key_generate, skill_route_pin
from apps.agents.services import agent_create, agent_publish, prompt_create, workflow_fixtures_seed
from apps.conformance.models import ProfileChange
from apps.console.services import membership_create, sign_in_refusal_record
from apps.core import egress
from apps.facets.negotiation import negotiation_decide
from apps.facets.services import facet_ensure, facet_refresh, facet_update, version_policy_set
from apps.oauth.documents import IssuerDocuments
from apps.oauth.services import issuer_add
from apps.peers.services import peer_binding_set, peer_credential_create
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus
from apps.push.services import push_config_create, webhook_register
from apps.retention.services import retention_set
from apps.runs.engine import run_advance
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_create, tenant_get_or_create
from tests.admin.html_pages import form_fields, page_links
from tests.browser.roles import PASSWORD, operator, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db(transaction=True)

ISSUER = "https://idp.example.test"
HOST_PAGES = ("/host/openwop-host/audit/negotiations", "/host/openwop-host/deprecation/")


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """At least one row of every model the admin lists, each made by its service where one exists."""
    dns = FakeDns()
    dns.set("hooks.example.com", ["93.184.216.34"])
    monkeypatch.setattr(egress, "resolve_host", dns)
    facet_ensure(protocol="a2a")
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"refresh_window_days": 60}, actor="test")
    facet_refresh(protocol="a2a")
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)
    _, raw = api_key_create(tenant=tenant, label="crawl")
    subject = subject_from_api_key(raw)
    agent = agent_create(tenant=tenant, actor="test", agent_id="helper", persona="Hal", roster=["conformance-noop"])
    agent_publish(agent=agent, actor="test")
    prompt_create(
        tenant=tenant, name="notes", title="Notes", agent=agent,
        messages=[{"role": "user", "content": {"type": "text", "text": "Summarise {{topic}}."}}],
        arguments=[{"name": "topic", "description": "What", "required": True}],
    )  # fmt: skip
    version_policy_set(tenant=tenant, agent=None, protocol="a2a", minimum="1.0", actor="test")
    retention_set(tenant=tenant, runs_days=7, legal_hold=True, actor="test")
    card_key_activate(key_pk=card_key_generate(algorithm="EdDSA", actor="test").pk, actor="test")
    negotiation_decide(protocol="a2a", requested="1.0", peer_origin="https://peer.example", subject=subject)
    SkillRoute.objects.create(workflow_id="conformance-noop", name="Noop", description="Does nothing")
    skill_route_pin(workflow_id="conformance-noop", actor="test")  # the routing choice and its audit row
    peer_binding_set(tenant=tenant, protocol="mcp", binding_id="tools", url="https://mcp.example/mcp")
    ProfileChange.objects.create(actor="test", action="apply", tenant="acme", tenant_b="globex")  # audit test data
    failed = run_create(subject=subject, workflow_id="conformance-failure", inputs={}, transport="rest")
    run_advance(run_id=failed.run_id, worker="crawl")
    waiting = run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")
    run_advance(run_id=waiting.run_id, worker="crawl")  # suspends on an interrupt
    TaskMessage.objects.create(tenant=tenant, run=waiting, principal=subject.subject_id, message_id="m1", document={})
    config = push_config_create(subject=subject, task_id=waiting.run_id, url="https://hooks.example.com/push")
    hook = webhook_register(subject=subject, url="https://hooks.example.com/in", events=["run.completed"])
    event = RunEvent.objects.for_tenant(tenant).filter(run=waiting).first()
    assert event is not None
    now = timezone.now()
    for kind, target, status in (("a2a_push", {"push_config": config}, DeliveryStatus.DELIVERED),
                                 ("webhook", {"webhook": hook}, DeliveryStatus.DEAD)):  # fmt: skip
        delivery = Delivery.objects.create(  # deliveries are made by the engine; test data only
            tenant=tenant,
            delivery_id=f"d-{kind}",
            kind=kind,
            run=waiting,
            event=event,
            event_type=event.type,
            body="{}",
            max_attempts=1,
            attempts=1,
            next_attempt_at=now,
            queue="q",
            status=status,
            settled_at=now,
            **target,
        )
        DeliveryAttempt.objects.create(tenant=tenant, delivery=delivery, number=1, status_code=500, at=now)
    peer_credential_create(subject=subject, url="https://peer.example/a2a", secret="peer-secret", label="peer")
    issuer_add(
        fields={"issuer": ISSUER, "tenant": tenant, "revocation": "exp-only"}, actor="test",
        documents=IssuerDocuments(metadata={"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"}, jwks={"keys": []}),
    )  # fmt: skip
    tenant_user("acme")  # a console user (TenantMembership)
    sign_in_refusal_record(door="console", username="tina-tenant", address="192.0.2.1")
    membership_create(tenant=tenant_get_or_create(slug="globex")[0], username="gus-globex", password=PASSWORD)
    return {"tenant": tenant, "failed": failed, "waiting": waiting, "hook": hook}


@pytest.fixture
def superuser_client(world: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def _admin_url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def _page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, f"{url}: {response.status_code}"
    return response.content.decode()


def _objects(model: type[Model], model_admin: admin.ModelAdmin[Any], request: Any) -> Iterator[Model]:
    """Up to three rows the admin lists for the model (its own queryset: proxies and filters kept)."""
    rows = list(model_admin.get_queryset(request)[:3])
    assert rows, f"the crawl's world has no {model._meta.label} row: seed one in `world`"
    yield from rows


def _internal(href: str, page_url: str) -> str | None:
    """The host path + query a link points to, or None when it leaves the host (or goes nowhere)."""
    if href.startswith(("#", "javascript:", "mailto:")) or not href:
        return None
    absolute = urljoin(f"http://testserver{page_url}", href)
    if absolute.startswith(settings.OPENWOP_PUBLIC_URL):
        absolute = "http://testserver" + absolute[len(settings.OPENWOP_PUBLIC_URL) :]
    parts = urlsplit(absolute)
    if parts.netloc != "testserver":
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _assert_links_resolve(client: Client, pages: dict[str, str]) -> int:
    """Every distinct in-host link on `pages` (url -> html) answers something other than 404 or a
    5xx; a link is requested, its body is not read (a stream stays unread)."""
    targets: dict[str, str] = {}
    for url, html in pages.items():
        for href in page_links(html):
            target = _internal(href, url)
            if target is not None:
                targets.setdefault(target, url)
    broken = {}
    for target, found_on in sorted(targets.items()):
        response = client.get(target)
        if response.status_code == 404 or response.status_code >= 500:
            broken[target] = (response.status_code, found_on)
        response.close()
    assert broken == {}, "links that lead nowhere: " + repr(broken)
    return len(targets)


def test_every_admin_page_loads_every_change_form_saves_unchanged_and_no_link_is_dead(
    superuser_client: Client, world: dict[str, Any]
) -> None:
    client = superuser_client
    request = RequestFactory().get("/admin/")
    request.user = User.objects.get(username="root")
    pages = {"/admin/": _page(client, "/admin/")}
    saved, read_only = [], []
    assert len(admin.site._registry) >= 27  # every registered model is crawled, not a hand-picked few
    for model, model_admin in admin.site._registry.items():
        changelist = _admin_url(model, "changelist")
        pages[changelist] = _page(client, changelist)
        add = _admin_url(model, "add")
        if model_admin.has_add_permission(request):
            pages[add] = _page(client, add)
        else:
            assert client.get(add).status_code == 403, add
        for obj in _objects(model, model_admin, request):
            change = _admin_url(model, "change", obj.pk)
            html = pages[change] = _page(client, change)
            history = _admin_url(model, "history", obj.pk)
            pages[history] = _page(client, history)
            delete = _admin_url(model, "delete", obj.pk)
            if model_admin.has_delete_permission(request, obj):
                _page(client, delete)  # the confirmation page only: the crawl deletes nothing
            else:
                assert client.get(delete).status_code == 403, delete  # evidence and audit rows stay
            if 'name="_save"' not in html:
                read_only.append(change)
                continue
            data: dict[str, list[str]] = {}
            for name, value in form_fields(html, f"{model._meta.model_name}_form"):
                data.setdefault(name, []).append(value)
            response = client.post(change, {**data, "_save": "Save"})
            errors = response.context["errors"] if response.status_code == 200 and response.context else None
            assert response.status_code == 302, f"{change} saved unchanged: {response.status_code} {errors!r}"
            saved.append(change)
    # The editable admins all saved; the read-only ones are evidence (audit rows, logs, deliveries).
    assert any("/agents/agent/" in url for url in saved) and any("/facets/facet/" in url for url in saved)
    assert any("/a2a/taskmessage/" in url for url in read_only) and any("/runs/run/" in url for url in read_only)
    for path in HOST_PAGES:
        pages[path] = _page(client, path)
    assert _assert_links_resolve(client, pages) > 100


def test_an_operator_sees_what_the_group_grants_and_saves_unchanged_forms(world: dict[str, Any]) -> None:
    """The `operators` group's own grants (apps/tenants/staff_roles.py): each page they may view
    loads, each form they may change saves unchanged, the rest is refused (403), never a 500."""
    account = operator()
    client = Client()
    assert client.login(username=account.username, password=account.password)
    user = User.objects.get(username=account.username)
    request = RequestFactory().get("/admin/")
    request.user = user
    saved = []
    for model, model_admin in admin.site._registry.items():
        changelist = _admin_url(model, "changelist")
        if not model_admin.has_view_or_change_permission(request):
            assert client.get(changelist).status_code == 403, changelist
            continue
        _page(client, changelist)
        obj = next(_objects(model, model_admin, request))
        change = _admin_url(model, "change", obj.pk)
        html = _page(client, change)
        if 'name="_save"' in html:
            data: dict[str, list[str]] = {}
            for name, value in form_fields(html, f"{model._meta.model_name}_form"):
                data.setdefault(name, []).append(value)
            response = client.post(change, {**data, "_save": "Save"})
            assert response.status_code == 302, f"{change} saved unchanged by an operator: {response.status_code}"
            saved.append(change)
    assert any("/agents/agent/" in url for url in saved) and any("/facets/facet/" in url for url in saved)
    assert client.get("/admin/auth/user/").status_code == 403  # operators never manage users


def test_every_console_page_loads_and_no_link_is_dead(world: dict[str, Any]) -> None:
    client = Client()
    assert client.login(username="tina-tenant", password=PASSWORD)
    run_ids = [world["failed"].run_id, world["waiting"].run_id]
    urls = [
        reverse("console:home"),  # the overview
        reverse("console:keys"),
        reverse("console:agents"),
        reverse("console:runs"),
        reverse("console:push"),
        *(reverse("console:task-push", args=[run_id]) for run_id in run_ids),
        *(reverse("console:run", args=[run_id]) for run_id in run_ids),
        reverse("console:webhook", args=[world["hook"].webhook_id]),
    ]
    pages = {url: _page(client, url) for url in urls}
    anonymous = Client()
    pages[reverse("console:login")] = _page(anonymous, reverse("console:login"))
    assert _assert_links_resolve(client, pages) >= 10
    # Another tenant's console user sees none of it: the one not-found page, for every id.
    other = Client()
    assert other.login(username="gus-globex", password=PASSWORD)
    for url in urls[5:]:
        assert other.get(url).status_code == 404, url
    assert Run.objects.for_tenant(Tenant.objects.get(slug="acme")).count() == 2
