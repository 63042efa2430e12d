"""Every admin changelist runs a fixed number of queries however many rows it lists: N rows and
3N rows cost the same (list_select_related, no per-row lookups). Rows are made by the services
where one exists, else directly (test data only)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from apps.a2a.models import SkillRoute, TaskMessage
from apps.agents.models import Workflow
from apps.agents.services import agent_create, workflow_fixtures_seed
from apps.console.services import membership_create
from apps.facets.negotiation import negotiation_decide
from apps.facets.services import facet_ensure, facet_refresh, facet_update
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus, PushConfig, Webhook
from apps.runs.models import RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_create, tenant_get_or_create

pytestmark = pytest.mark.django_db
N = 2
_counter = itertools.count()


def _add_rows(count: int) -> None:
    """`count` more rows in every admin-listed table, spread over several tenants."""
    for _ in range(count):
        i = next(_counter)
        tenant = tenant_get_or_create(slug=f"t{i}")[0]
        workflow_fixtures_seed(tenant=tenant)
        _, raw = api_key_create(tenant=tenant, label=f"k{i}")
        subject = subject_from_api_key(raw)
        agent_create(tenant=tenant, actor="test", agent_id=f"a{i}", persona=f"P{i}", roster=["conformance-noop"])
        Workflow.objects.create(tenant=tenant, workflow_id=f"w{i}", definition={"nodes": []})
        run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
        event = RunEvent.objects.for_tenant(tenant).filter(run=run).first()
        assert event is not None
        negotiation_decide(protocol="a2a", requested="1.0", peer_origin="https://peer.example", subject=subject)
        TaskMessage.objects.create(
            tenant=tenant, run=run, principal=subject.subject_id, message_id=f"m{i}", document={}
        )
        SkillRoute.objects.create(workflow_id=f"w{i}", name=f"W{i}", description="d")
        config = PushConfig.objects.create(tenant=tenant, config_id=f"c{i}", run=run, url="https://hooks.example.com/")
        hook = Webhook.objects.create(tenant=tenant, webhook_id=f"h{i}", url="https://hooks.example.com/", events=[])
        now = timezone.now()
        for kind, target, status in (
            ("a2a_push", {"push_config": config}, DeliveryStatus.DELIVERED),
            ("webhook", {"webhook": hook}, DeliveryStatus.DEAD),
        ):
            delivery = Delivery.objects.create(
                tenant=tenant,
                delivery_id=f"d{kind}{i}",
                kind=kind,
                run=run,
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
        membership_create(tenant=tenant, username=f"user{i}", password="pw-123456789")
        facet_update(protocol="mcp", changes={"refresh_window_days": 10 + i}, actor="test")
        facet_refresh(protocol="a2a")


def _changelists() -> list[str]:
    return [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist") for model in admin.site._registry
    ]


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


def test_changelist_queries_do_not_grow_with_rows(client: Client) -> None:
    facet_ensure(protocol="a2a")
    facet_ensure(protocol="mcp")
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    _add_rows(N)
    urls = _changelists()
    assert len(urls) >= 18  # every registered model is measured, not a hand-picked few
    few = {url: _queries(client, url) for url in urls}
    _add_rows(2 * N)
    assert Tenant.objects.count() >= 3 * N
    grown: dict[str, Any] = {url: (few[url], _queries(client, url)) for url in urls}
    assert {url: counts for url, counts in grown.items() if counts[0] != counts[1]} == {}
