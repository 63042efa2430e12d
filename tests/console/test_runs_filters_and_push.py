"""The console's runs list filters (status, workflow, time range) and search by id, with the rows
fragment the page polls for new runs; push configs that show their receiver (never the
credential), dead deliveries that say why, an egress refusal that names the operator's allowlist,
and a confirm step before a key is revoked or a push config removed (issue 53 item 4)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.utils import timezone

from apps.agents.services import workflow_fixtures_seed
from apps.core import egress
from apps.push.models import Delivery, DeliveryStatus, PushConfig
from apps.push.services import push_config_create
from apps.runs.engine import run_advance
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_create
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_create
from apps.tenants.subject import Subject
from tests.browser.roles import PASSWORD, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(make_key, monkeypatch: pytest.MonkeyPatch) -> tuple[Client, Subject]:  # type: ignore[no-untyped-def]
    dns = FakeDns()
    dns.set("hooks.example.com", ["93.184.216.34"])
    dns.set("internal.example.com", ["10.1.2.3"])
    monkeypatch.setattr(egress, "resolve_host", dns)
    client = Client()
    assert client.login(username=tenant_user("acme").username, password=PASSWORD)
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    return client, subject_from_api_key(make_key("acme"))


def _run(subject: Subject, workflow_id: str) -> Run:
    run = run_create(subject=subject, workflow_id=workflow_id, inputs={}, transport="rest")
    run_advance(run_id=run.run_id, worker="test")
    run.refresh_from_db()
    return run


def _listed(client: Client, path: str, **params: str) -> list[str]:
    response = client.get(path, params)
    assert response.status_code == 200
    return re.findall(r'<tr data-run-id="([^"]+)">', response.content.decode())


def test_runs_are_filtered_by_status_workflow_time_and_id(acme: tuple[Client, Subject], make_key) -> None:  # type: ignore[no-untyped-def]
    client, subject = acme
    noop, failed, waiting = (
        _run(subject, w) for w in ("conformance-noop", "conformance-failure", "conformance-approval")
    )
    old = _run(subject, "conformance-noop")
    Run.objects.for_tenant(old.tenant_id).filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=3))
    globex = subject_from_api_key(make_key("globex"))
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="globex"))
    foreign = _run(globex, "conformance-failure")

    for path in ("/console/runs/", "/console/runs/rows"):
        assert _listed(client, path) == [waiting.run_id, failed.run_id, noop.run_id, old.run_id], path
        assert _listed(client, path, status="failed") == [failed.run_id]  # never globex's failure
        assert _listed(client, path, workflow="conformance-noop") == [noop.run_id, old.run_id]
        yesterday = (timezone.now() - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        assert _listed(client, path, workflow="conformance-noop", created_from=yesterday) == [noop.run_id]
        assert _listed(client, path, created_until=yesterday) == [old.run_id]
        opaque = failed.run_id.split("/", 1)[1]
        assert _listed(client, path, q=opaque) == [failed.run_id]
        assert _listed(client, path, q=opaque[:8]) == [failed.run_id]
        assert _listed(client, path, q=failed.run_id) == [failed.run_id]
        assert _listed(client, path, q=foreign.run_id) == []  # another tenant's id finds nothing

    # A reversed range is said and ignored; the other filters still apply.
    tomorrow = (timezone.now() + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    response = client.get(
        "/console/runs/", {"status": "completed", "created_from": tomorrow, "created_until": "2020-01-01T00:00"}
    )
    page = response.content.decode()
    assert "The time range ends before it starts, so it is ignored; the other filters apply." in page
    assert re.findall(r'<tr data-run-id="([^"]+)">', page) == [noop.run_id, old.run_id]
    # A malformed field is said and only it is ignored; an unknown status or workflow the same.
    response = client.get("/console/runs/", {"created_from": "last tuesday", "workflow": "conformance-failure"})
    assert response.status_code == 200 and 'id="id_created_from-errors"' in response.content.decode()
    assert re.findall(r'<tr data-run-id="([^"]+)">', response.content.decode()) == [failed.run_id]
    for bad in ({"status": "exploded"}, {"workflow": "<b>nope</b>"}, {"q": "a\x00b"}):
        response = client.get("/console/runs/", bad)
        assert response.status_code == 200 and b"<b>nope</b>" not in response.content, bad
    assert b"No runs match these filters." in client.get("/console/runs/", {"q": "zzzz-none"}).content

    page = client.get("/console/runs/", {"status": "failed"}).content.decode()
    assert 'data-rows-poll="/console/runs/rows?status=failed"' in page  # the poll keeps the filters
    assert f'href="/console/run/{failed.run_id}"' in page
    rows = client.get("/console/runs/rows")
    assert rows["Cache-Control"] == "no-store" and b"<html" not in rows.content
    anonymous = Client().get("/console/runs/rows")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/console/login/")


def test_push_configs_show_their_receiver_and_dead_deliveries_say_why(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = _run(subject, "conformance-approval")
    config = push_config_create(
        subject=subject, task_id=run.run_id, url="https://hooks.example.com/in/acme?sig=q-secret", token="tok-secret-1"
    )
    event = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).first()
    assert event is not None
    now = timezone.now()
    Delivery.objects.create(  # made by the engine in production; test data only
        tenant_id=run.tenant_id,
        delivery_id="dead-one",
        kind="a2a_push",
        push_config=config,
        run=run,
        event=event,
        event_type=event.type,
        body="{}",
        attempts=3,
        max_attempts=3,
        next_attempt_at=now,
        queue="q",
        status=DeliveryStatus.DEAD,
        settled_at=now,
        last_error="TLS handshake failed",
    )
    for path in ("/console/push/", f"/console/push/tasks/{run.run_id}", f"/console/run/{run.run_id}"):
        page = client.get(path).content.decode()
        assert "https://hooks.example.com/in/acme?…" in page, path
        assert "q-secret" not in page and "tok-secret-1" not in page, path
        assert f'href="/console/run/{run.run_id}"' in page or path.startswith("/console/run/"), path
    for path in (f"/console/push/tasks/{run.run_id}", f"/console/run/{run.run_id}"):
        page = client.get(path).content.decode()
        [row] = re.findall(r'data-delivery="dead-one">(.*?)</tr>', page, flags=re.S)
        assert "TLS handshake failed" in row, path
    # A run page's link fills the task id in the push form.
    form = client.get("/console/push/", {"task": run.run_id}).content.decode()
    assert f'name="task_id" value="{run.run_id}"' in form


def test_an_egress_refusal_names_the_operators_allowlist(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = _run(subject, "conformance-approval")
    for url in ("https://internal.example.com/hook", "https://127.0.0.1/hook"):
        response = client.post("/console/push/", {"task_id": run.run_id, "url": url})
        page = response.content.decode()
        [errors] = re.findall(r'<ul class="errors" role="alert" id="id_url-errors">(.*?)</ul>', page, flags=re.S)
        assert "OPENWOP_EGRESS_ALLOW_CIDRS" in errors, url
        assert "10.1.2.3" not in page  # the resolved address stays in the operators' log
    assert not PushConfig.objects.for_tenant(run.tenant_id).exists()


def test_revoke_and_remove_ask_to_confirm_first(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    key, _ = api_key_create(tenant=Tenant.objects.get(slug="acme"), label="<i>ci</i>")
    keys = client.get("/console/keys/").content.decode()
    assert (
        f'href="/console/keys/{key.prefix}/revoke"' in keys
        and f'action="/console/keys/{key.prefix}/revoke"' not in keys
    )
    confirm = client.get(f"/console/keys/{key.prefix}/revoke")
    page = confirm.content.decode()
    assert confirm.status_code == 200 and f'action="/console/keys/{key.prefix}/revoke"' in page
    assert "csrfmiddlewaretoken" in page and "&lt;i&gt;ci&lt;/i&gt;" in page and "<i>ci</i>" not in page
    assert ApiKey.unscoped_all_tenants.get(pk=key.pk).revoked_at is None  # asking changed nothing
    assert client.post(f"/console/keys/{key.prefix}/revoke").status_code == 302
    assert ApiKey.unscoped_all_tenants.get(pk=key.pk).revoked_at is not None
    assert "Already revoked" in client.get(f"/console/keys/{key.prefix}/revoke").content.decode()

    run = _run(subject, "conformance-approval")
    config = push_config_create(subject=subject, task_id=run.run_id, url="https://hooks.example.com/x")
    remove = f"/console/push/tasks/{run.run_id}/configs/{config.config_id}/remove"
    confirm = client.get(remove)
    assert confirm.status_code == 200 and f'action="{remove}"' in confirm.content.decode()
    assert "https://hooks.example.com/x" in confirm.content.decode()
    assert "its delivery history goes with it" in confirm.content.decode()  # said before, not found after
    assert PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()
    csrf = Client(enforce_csrf_checks=True)
    assert csrf.login(username="tina-tenant", password=PASSWORD)
    assert csrf.post(remove).status_code == 403  # CSRF on the confirmed POST too
    assert PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()
    assert client.post(remove).status_code == 302
    assert not PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()
