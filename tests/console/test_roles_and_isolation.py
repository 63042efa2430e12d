"""Each role is refused from the others' pages, and a tenant user sees only their tenant: another
tenant's ids answer the console's 404 page, byte for byte the same as unknown ids
(interop.md §Isolation). Plain Django test client on the real URLconf."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from apps.agents.services import workflow_fixtures_seed
from apps.core import egress
from apps.push.services import webhook_register
from apps.runs.services import run_create
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.browser.roles import PASSWORD, auditor, operator, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db

AUDIT_PAGE = "/host/openwop-host/audit/negotiations"
OPERATOR_PAGES = ("/admin/", "/admin/facets/facet/", "/admin/tenants/apikey/", "/admin/agents/agent/")


def _client(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def _refused_from_admin(response) -> bool:  # type: ignore[no-untyped-def]
    return response.status_code == 403 or (response.status_code == 302 and "/admin/login/" in response["Location"])


def test_tenant_user_is_refused_from_admin_and_auditor_pages() -> None:
    client = _client(tenant_user().username)
    for path in OPERATOR_PAGES:
        assert _refused_from_admin(client.get(path)), path
    response = client.get(AUDIT_PAGE)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert client.get("/console/keys/").status_code == 200


def test_auditor_is_refused_from_console_and_operator_admin() -> None:
    client = _client(auditor().username)
    assert client.get(AUDIT_PAGE).status_code == 200
    console = client.get("/console/keys/")
    assert console.status_code == 403 and b"Not a console account" in console.content
    for path in OPERATOR_PAGES[1:]:
        assert client.get(path).status_code == 403, path
    assert client.get("/admin/facets/facet/a2a/change/").status_code in (302, 403)


def test_operator_without_membership_is_refused_from_console_and_auditor_page() -> None:
    client = _client(operator().username)
    assert client.get("/admin/facets/facet/").status_code == 200
    assert client.get("/console/keys/").status_code == 403
    assert client.get("/console/runs/").status_code == 403
    response = client.get(AUDIT_PAGE)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_console_login_refuses_accounts_without_a_tenant() -> None:
    operator_account = operator()
    response = Client().post("/console/login/", {"username": operator_account.username, "password": PASSWORD})
    wrong = Client().post("/console/login/", {"username": operator_account.username, "password": "not-it"})
    assert response.status_code == wrong.status_code == 200
    # The refusal says nothing a wrong password would not: the password's being right is not told.
    assert "_auth_user_id" not in response.wsgi_request.session
    refusal = response.context["form"].non_field_errors()
    assert refusal == wrong.context["form"].non_field_errors() and "correct username and password" in str(refusal)
    anonymous = Client().get("/console/push/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/console/login/")


def test_console_login_needs_csrf() -> None:
    account = tenant_user()
    client = Client(enforce_csrf_checks=True)
    response = client.post("/console/login/", {"username": account.username, "password": PASSWORD})
    assert response.status_code == 403


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    """hooks.example.com resolves to a public address (no network in tests)."""
    fake = FakeDns()
    fake.set("hooks.example.com", ["93.184.216.34"])
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


@pytest.fixture
def foreign_ids(make_key: Callable[..., str]) -> dict[str, str]:
    """Ids that exist, but in globex: a run, a webhook, an API key prefix."""
    key = make_key("globex")
    globex = Tenant.objects.get(slug="globex")
    workflow_fixtures_seed(tenant=globex)
    subject = subject_from_api_key(key)
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    hook = webhook_register(subject=subject, url="https://hooks.example.com/in", events=["run.completed"])
    return {"run": run.run_id, "webhook": hook.webhook_id, "key": ApiKey.objects.for_tenant(globex).get().prefix}


def test_foreign_ids_look_exactly_like_unknown_ones(foreign_ids: dict[str, str]) -> None:
    client = _client(tenant_user("acme").username)
    pairs = [
        (f"/console/push/tasks/{foreign_ids['run']}", "/console/push/tasks/globex/does-not-exist"),
        (f"/console/push/webhooks/{foreign_ids['webhook']}", "/console/push/webhooks/does-not-exist"),
        (f"/console/runs/status/{foreign_ids['run']}", "/console/runs/status/acme/does-not-exist"),
        (f"/console/run/{foreign_ids['run']}", "/console/run/acme/does-not-exist"),
        (f"/console/keys/{foreign_ids['key']}/revoke", "/console/keys/000000000000/revoke"),
    ]
    for foreign, unknown in pairs:
        a, b = client.get(foreign), client.get(unknown)
        assert a.status_code == b.status_code == 404, foreign
        assert a.content == b.content
        assert foreign_ids["run"].encode() not in a.content
    revoke_foreign = client.post(f"/console/keys/{foreign_ids['key']}/revoke")
    revoke_unknown = client.post("/console/keys/000000000000/revoke")
    assert revoke_foreign.status_code == revoke_unknown.status_code == 404
    assert revoke_foreign.content == revoke_unknown.content
    assert ApiKey.unscoped_all_tenants.get(prefix=foreign_ids["key"]).revoked_at is None
    # A push config on a foreign task is refused like one on an unknown task.
    refused = client.post(
        "/console/push/", {"task_id": foreign_ids["run"], "url": "https://hooks.example.com/x", "token": ""}
    )
    assert refused.status_code == 200 and b"No such task." in refused.content
    # And the lists show nothing of globex.
    lists = ("/console/", "/console/keys/", "/console/runs/", "/console/runs/rows", "/console/push/")
    for path in (*lists, "/console/agents/"):
        body = client.get(path).content
        assert b"globex" not in body, path


def test_keys_are_created_once_and_revoked_through_the_service() -> None:
    client = _client(tenant_user("acme").username)
    created = client.post("/console/keys/", {"label": "ci", "kind": "user"})
    assert created.status_code == 302 and created["Location"] == "/console/keys/"  # POST-redirect-GET
    assert ApiKey.unscoped_all_tenants.filter(label="ci").count() == 1
    stored = SessionStore(client.session.session_key).load()
    assert stored["openwop.new_key"] and "owk_" not in json.dumps(stored)  # sealed, never readable
    shown = client.get("/console/keys/")
    assert shown.status_code == 200 and shown["Cache-Control"] == "no-store"
    raw = shown.context["new_key"]
    assert raw.startswith("owk_") and raw.encode() in shown.content
    assert subject_from_api_key(raw).tenant == "acme"
    assert "openwop.new_key" not in SessionStore(client.session.session_key).load()  # popped on display
    reloaded = client.get("/console/keys/")  # a reload is a GET: no second key, no key shown
    assert raw.encode() not in reloaded.content and reloaded.context["new_key"] is None
    assert ApiKey.unscoped_all_tenants.filter(label="ci").count() == 1
    prefix = raw.removeprefix("owk_").split(".")[0]
    assert client.post(f"/console/keys/{prefix}/revoke").status_code == 302
    assert ApiKey.unscoped_all_tenants.get(prefix=prefix).revoked_at is not None


def test_push_config_is_registered_on_the_tenants_own_task(make_key: Callable[..., str]) -> None:
    client = _client(tenant_user("acme").username)
    subject = subject_from_api_key(make_key("acme"))
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    run = run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")
    response = client.post("/console/push/", {"task_id": run.run_id, "url": "https://hooks.example.com/x"})
    assert response.status_code == 302 and response["Location"] == f"/console/push/tasks/{run.run_id}"
    page = client.get(response["Location"])
    assert page.status_code == 200 and b"No deliveries yet." in page.content
    refused = client.post("/console/push/", {"task_id": run.run_id, "url": "https://127.0.0.1/x"})
    assert refused.status_code == 200 and b'id="id_url-errors"' in refused.content


def test_membership_is_one_user_one_tenant() -> None:
    from apps.console.services import membership_create
    from apps.core.errors import ValidationFailed

    tenant_user("acme", "solo")
    with pytest.raises(ValidationFailed):
        membership_create(tenant=Tenant.objects.get(slug="acme"), username="solo")
    User.objects.create_user("staffer", password=PASSWORD, is_staff=True)
    with pytest.raises(ValidationFailed):
        membership_create(tenant=Tenant.objects.get(slug="acme"), username="staffer")
