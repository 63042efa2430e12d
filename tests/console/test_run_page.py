"""The console's overview and run page (issue 53 item 4): the landing shows recent runs, failed runs
with their reason and deliveries needing attention; a run's page shows its inputs, outputs, error
and events, and approves or rejects its open interrupt through the run service the REST resume
calls; caller strings are escaped; another tenant's run is the one not-found page."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from apps.agents.services import workflow_fixtures_seed
from apps.core import egress
from apps.push.models import Delivery, DeliveryStatus
from apps.push.services import push_config_create
from apps.runs.engine import run_advance
from apps.runs.models import Interrupt, Run, RunEvent, RunStatus
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject
from tests.browser.roles import PASSWORD, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert('x')</script>"


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
    return _console("acme", "tina-tenant"), subject_from_api_key(make_key("acme"))


def _run(subject: Subject, workflow_id: str, inputs: dict | None = None) -> Run:  # type: ignore[type-arg]
    run = run_create(subject=subject, workflow_id=workflow_id, inputs=inputs or {}, transport="rest")
    run_advance(run_id=run.run_id, worker="test")
    run.refresh_from_db()
    return run


def _delivery(run: Run, config, delivery_id: str, status: str, **fields) -> Delivery:  # type: ignore[no-untyped-def]
    event = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).order_by("-sequence").first()
    assert event is not None
    now = timezone.now()
    return Delivery.objects.create(  # made by the engine in production; test data only
        tenant_id=run.tenant_id,
        delivery_id=delivery_id,
        kind="a2a_push",
        push_config=config,
        run=run,
        event=event,
        event_type=event.type,
        body="{}",
        max_attempts=3,
        next_attempt_at=now,
        queue="q",
        status=status,
        settled_at=None if status == DeliveryStatus.PENDING else now,
        **fields,
    )


def _section(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : page.index("</table>", start)]


def test_the_console_lands_on_an_overview(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    failed = _run(subject, "conformance-failure")
    waiting = _run(subject, "conformance-approval")
    assert failed.status == RunStatus.FAILED and waiting.status == RunStatus.WAITING_APPROVAL
    config = push_config_create(subject=subject, task_id=waiting.run_id, url="https://hooks.example.com/in?sig=s3cr3t")
    _delivery(waiting, config, "dead-one", DeliveryStatus.DEAD, attempts=3, last_error="connect timeout")
    _delivery(failed, push_config_create(subject=subject, task_id=failed.run_id, url="https://hooks.example.com/f"),
              "retrying-one", DeliveryStatus.PENDING, attempts=1, last_status_code=503)  # fmt: skip
    _delivery(failed, push_config_create(subject=subject, task_id=failed.run_id, url="https://hooks.example.com/g"),
              "fine-one", DeliveryStatus.DELIVERED, attempts=1, last_status_code=200)  # fmt: skip

    signed_in = Client().post("/console/login/", {"username": "tina-tenant", "password": PASSWORD})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/console/"  # the landing
    page = client.get("/console/").content.decode()
    assert "<h1>Overview of acme</h1>" in page

    recent = _section(page, "recent-runs")
    assert recent.index(waiting.run_id) < recent.index(failed.run_id)  # newest first
    assert f'href="/console/run/{waiting.run_id}"' in recent
    failures = _section(page, "failed-runs")
    assert failed.run_id in failures and waiting.run_id not in failures
    assert "This fixture fails by design." in failures  # the reason

    attention = _section(page, "attention")
    rows = dict(re.findall(r'data-delivery="([^"]+)">(.*?)</tr>', attention, flags=re.S))
    assert sorted(rows) == ["dead-one", "retrying-one"]  # the delivered one needs nothing
    assert "connect timeout" in rows["dead-one"] and "failing, retrying" in rows["retrying-one"]
    assert "HTTP 503" in rows["retrying-one"] and f'href="/console/run/{failed.run_id}"' in rows["retrying-one"]
    assert "https://hooks.example.com/in?…" in rows["dead-one"] and "s3cr3t" not in page


def test_a_run_page_shows_inputs_outputs_and_the_timeline_escaped(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = _run(subject, "echo", {"note": HOSTILE})
    assert run.status == RunStatus.COMPLETED and run.outputs
    response = client.get(f"/console/run/{run.run_id}")
    assert response.status_code == 200
    page = response.content.decode()
    assert HOSTILE not in page  # caller data never reaches the page as markup
    escaped = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert escaped in page[page.index('id="run-inputs"') : page.index("</pre>", page.index('id="run-inputs"'))]
    assert escaped in page[page.index('id="run-outputs"') :]
    types = re.findall(r'<li data-sequence="\d+" data-type="([^"]+)">', page)
    assert types == list(
        RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).order_by("sequence").values_list("type", flat=True)
    )
    assert types[-1] == "run.completed"
    assert 'data-run-stream=""' in page  # finished: nothing to follow

    failed = _run(subject, "conformance-failure")
    page = client.get(f"/console/run/{failed.run_id}").content.decode()
    error = page[page.index('id="run-error"') :]
    assert "conformance_failure" in error and "This fixture fails by design." in error


def test_an_approval_is_approved_and_rejected_on_the_run_page(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = _run(subject, "conformance-approval")
    page = client.get(f"/console/run/{run.run_id}").content.decode()
    assert "Waiting: Approve the conformance run?" in page
    assert f'action="/console/run/{run.run_id}/interrupt"' in page and "csrfmiddlewaretoken" in page
    assert f'data-run-stream="/console/runs/status/{run.run_id}?after={run.last_sequence}"' in page

    # CSRF on: a post without the token is refused and resolves nothing.
    csrf_client = Client(enforce_csrf_checks=True)
    assert csrf_client.login(username="tina-tenant", password=PASSWORD)
    refused = csrf_client.post(f"/console/run/{run.run_id}/interrupt", {"node_id": "approve", "action": "accept"})
    assert refused.status_code == 403
    assert Interrupt.objects.for_tenant(run.tenant_id).get(run=run).resolved_at is None

    answered = client.post(
        f"/console/run/{run.run_id}/interrupt", {"node_id": "approve", "action": "accept", "comment": HOSTILE}
    )
    assert answered.status_code == 302 and answered["Location"] == f"/console/run/{run.run_id}"
    interrupt = Interrupt.objects.for_tenant(run.tenant_id).get(run=run)
    assert interrupt.resolution == {"action": "accept", "comment": HOSTILE}
    resolved = RunEvent.objects.for_tenant(run.tenant_id).get(run=run, type="interrupt.resolved")
    assert resolved.payload["resumeValue"] == {"action": "accept", "comment": HOSTILE}
    page = client.get(answered["Location"]).content.decode()
    assert "Approved: the run continues from its answer." in page and 'id="interrupt-form"' not in page
    assert HOSTILE not in page
    run_advance(run_id=run.run_id, worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.outputs == {
        "approved": True,
        "action": "accept",
        "comment": HOSTILE,
    }

    again = client.post(f"/console/run/{run.run_id}/interrupt", {"node_id": "approve", "action": "reject"}, follow=True)
    assert again.status_code == 200
    assert "Nothing was resolved: the interrupt was already resolved, or its run has ended." in again.content.decode()

    other = _run(subject, "conformance-approval")
    assert (
        client.post(f"/console/run/{other.run_id}/interrupt", {"node_id": "approve", "action": "reject"}).status_code
        == 302
    )
    run_advance(run_id=other.run_id, worker="test")
    other.refresh_from_db()
    assert other.status == RunStatus.FAILED and other.error["code"] == "approval_rejected"
    nonsense = client.post(
        f"/console/run/{other.run_id}/interrupt", {"node_id": "approve", "action": "maybe"}, follow=True
    )
    assert "Nothing was resolved: choose Approve or Reject." in nonsense.content.decode()


def test_an_approval_with_listed_approvers_offers_no_buttons(acme: tuple[Client, Subject]) -> None:
    client, subject = acme
    run = _run(subject, "conformance-approval")
    interrupt = Interrupt.objects.for_tenant(run.tenant_id).get(run=run)
    payload = {**interrupt.payload, "data": {**interrupt.payload["data"], "approversList": ["urn:someone:else"]}}
    Interrupt.objects.for_tenant(run.tenant_id).filter(pk=interrupt.pk).update(payload=payload)  # test data
    page = client.get(f"/console/run/{run.run_id}").content.decode()
    assert 'id="interrupt-form"' not in page and "Only the interrupt&#x27;s listed approvers may resolve it." in page
    refused = client.post(
        f"/console/run/{run.run_id}/interrupt", {"node_id": "approve", "action": "accept"}, follow=True
    )
    assert "Nothing was resolved: The caller is not an eligible approver of this interrupt." in refused.content.decode()
    assert Interrupt.objects.for_tenant(run.tenant_id).get(pk=interrupt.pk).resolved_at is None


def test_another_tenants_run_is_the_one_not_found_page(acme: tuple[Client, Subject], make_key) -> None:  # type: ignore[no-untyped-def]
    client, _ = acme
    subject = subject_from_api_key(make_key("globex"))
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="globex"))
    foreign = _run(subject, "conformance-approval")
    assert foreign.status == RunStatus.WAITING_APPROVAL
    pairs = [
        (f"/console/run/{foreign.run_id}", "/console/run/acme/doesnotexist00000000"),
        (f"/console/run/{foreign.run_id}", f"/console/run/globex/{'x' * 20}"),
    ]
    for theirs, unknown in pairs:
        a, b = client.get(theirs), client.get(unknown)
        assert a.status_code == b.status_code == 404 and a.content == b.content
        assert foreign.run_id.encode() not in a.content
    post_foreign = client.post(f"/console/run/{foreign.run_id}/interrupt", {"node_id": "approve", "action": "accept"})
    post_unknown = client.post(
        "/console/run/acme/doesnotexist00000000/interrupt", {"node_id": "approve", "action": "accept"}
    )
    assert post_foreign.status_code == post_unknown.status_code == 404 and post_foreign.content == post_unknown.content
    assert Interrupt.objects.for_tenant(foreign.tenant_id).get(run=foreign).resolved_at is None
    for path in ("/console/", "/console/runs/", "/console/runs/rows"):
        assert foreign.run_id.encode() not in client.get(path).content, path
