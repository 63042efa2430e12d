"""Console loose ends (issue 32 item 10): a push config registered in the console can be removed
there (through the push service, tenant-scoped: another tenant's is the one not-found page),
failed runs say why, and page titles name the host once."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from apps.agents.services import workflow_fixtures_seed
from apps.core import egress
from apps.push.models import Delivery, DeliveryStatus, PushConfig
from apps.push.services import push_config_create
from apps.runs.engine import run_advance
from apps.runs.models import RunEvent, RunStatus
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject
from tests.browser.roles import PASSWORD, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db


def _console(slug: str, username: str) -> Client:
    client = Client()
    assert client.login(username=tenant_user(slug, username).username, password=PASSWORD)
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    return client


@pytest.fixture
def acme(make_key, monkeypatch: pytest.MonkeyPatch) -> tuple[Client, Subject]:  # type: ignore[no-untyped-def]
    dns = FakeDns()
    dns.set("hooks.example.com", ["93.184.216.34"])
    monkeypatch.setattr(egress, "resolve_host", dns)
    client = _console("acme", "tina-tenant")
    return client, subject_from_api_key(make_key("acme"))


def _remove_url(run_id: str, config_id: str) -> str:
    return f"/console/push/tasks/{run_id}/configs/{config_id}/remove"


def test_a_push_config_is_removed_in_the_console_with_its_pending_deliveries(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")
    config = push_config_create(subject=subject, task_id=run.run_id, url="https://hooks.example.com/push", token="t0k")
    event = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).first()
    assert event is not None
    pending = Delivery.objects.create(  # made by the engine in production; test data only
        tenant_id=run.tenant_id,
        delivery_id="pending-one",
        kind="a2a_push",
        push_config=config,
        run=run,
        event=event,
        event_type=event.type,
        body="{}",
        max_attempts=3,
        next_attempt_at=timezone.now(),
        queue="q",
        status=DeliveryStatus.PENDING,
    )
    for page in ("/console/push/", f"/console/push/tasks/{run.run_id}", f"/console/run/{run.run_id}"):
        assert f'href="{_remove_url(run.run_id, config.config_id)}"' in client.get(page).content.decode()
    confirm = client.get(_remove_url(run.run_id, config.config_id))  # a confirm step: nothing removed yet
    assert confirm.status_code == 200
    assert f'action="{_remove_url(run.run_id, config.config_id)}"' in confirm.content.decode()
    assert PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()

    response = client.post(_remove_url(run.run_id, config.config_id))
    assert response.status_code == 302 and response["Location"] == f"/console/push/tasks/{run.run_id}"
    assert not PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()
    assert not Delivery.objects.for_tenant(run.tenant_id).filter(pk=pending.pk, status=DeliveryStatus.PENDING).exists()
    page = client.get(response["Location"]).content.decode()
    assert f"Push config {config.config_id} removed" in page and 'data-config="' not in page
    assert client.post(_remove_url(run.run_id, config.config_id)).status_code == 404  # gone: the one not-found page


def test_another_tenants_push_config_is_not_found_and_stays(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")
    config = push_config_create(subject=subject, task_id=run.run_id, url="https://hooks.example.com/push")
    globex = _console("globex", "gus-globex")
    for method in (globex.get, globex.post):  # the confirm page and the removal alike
        foreign = method(_remove_url(run.run_id, config.config_id))
        unknown = method(_remove_url(run.run_id, "no-such-config"))
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.content == unknown.content  # same bytes: nothing says the id exists elsewhere
    assert PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()
    # Nor can acme remove a config through another of its tasks' ids.
    other = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    assert client.post(_remove_url(other.run_id, config.config_id)).status_code == 404
    assert PushConfig.objects.for_tenant(run.tenant_id).filter(pk=config.pk).exists()


def test_failed_runs_say_why_on_the_runs_and_push_pages(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = run_create(subject=subject, workflow_id="conformance-failure", inputs={}, transport="rest")
    run_advance(run_id=run.run_id, worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error
    for page in ("/console/runs/", f"/console/push/tasks/{run.run_id}", "/console/", f"/console/run/{run.run_id}"):
        html = client.get(page).content.decode()
        reasons = re.findall(rf'data-run-reason="{re.escape(run.run_id)}">Reason: ([^<]+)', html)
        assert reasons and all(run.error["message"] in reason for reason in reasons), page  # the overview: twice


def test_titles_name_the_host_once(acme: tuple[Client, Subject]) -> None:
    client, _ = acme
    titles = [re.search(r"<title>(.*?)</title>", Client().get("/console/login/").content.decode()).group(1)]  # type: ignore[union-attr]
    titles.append(re.search(r"<title>(.*?)</title>", client.get("/console/keys/").content.decode()).group(1))  # type: ignore[union-attr]
    titles.append(re.search(r"<title>(.*?)</title>", client.get("/console/").content.decode()).group(1))  # type: ignore[union-attr]
    assert titles == [
        "Sign in · openwop-host console",
        "API keys · acme · openwop-host console",
        "Overview · acme · openwop-host console",
    ]
