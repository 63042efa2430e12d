"""The push listings the console reads (apps/push/selectors.py): tenant-scoped, newest first,
limited, and a delivery's attempts come in one extra query however many deliveries there are."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from apps.agents.services import workflow_fixtures_seed
from apps.push.models import Delivery, DeliveryAttempt, DeliveryKind, DeliveryStatus, Webhook
from apps.push.selectors import (
    push_configs_of_tenant,
    task_push_deliveries,
    webhook_deliveries,
    webhooks_of_tenant,
)
from apps.push.services import push_config_create, webhook_register
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db


def _subject(make_key: Any, slug: str) -> Any:
    workflow_fixtures_seed(tenant=tenant_get_or_create(slug=slug)[0])
    return subject_from_api_key(make_key(slug))


def _delivery(run: Run, name: str, *, webhook: Webhook | None = None, config: Any = None) -> Delivery:
    """A delivery with two attempts, on an event of its own (one delivery per target and event)."""
    now = timezone.now()
    sequence = 1000 + RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).count()
    event = RunEvent.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        sequence=sequence,
        event_id=f"evt-{name}",
        type="run.progress",
        payload={},
        at=now,
    )
    delivery = Delivery.objects.create(
        tenant_id=run.tenant_id,
        delivery_id=name,
        webhook=webhook,
        push_config=config,
        run=run,
        event=event,
        kind=DeliveryKind.WEBHOOK if webhook else DeliveryKind.A2A_PUSH,
        event_type=event.type,
        body="{}",
        attempts=2,
        max_attempts=3,
        next_attempt_at=now,
        queue="q",
        status=DeliveryStatus.PENDING,
    )
    for number in (1, 2):
        DeliveryAttempt.objects.create(
            tenant_id=run.tenant_id, delivery=delivery, number=number, status_code=503, at=now
        )
    return delivery


def _run(subject: Any) -> Run:
    return run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")


def test_listings_are_the_tenants_own_newest_first_and_limited(make_key: Any) -> None:
    acme, globex = _subject(make_key, "acme"), _subject(make_key, "globex")
    acme_runs = [_run(acme) for _ in range(3)]
    globex_run = _run(globex)
    configs = [push_config_create(subject=acme, task_id=r.run_id, url="https://hooks.example.com/a") for r in acme_runs]
    push_config_create(subject=globex, task_id=globex_run.run_id, url="https://hooks.example.com/g")
    hooks = [webhook_register(subject=acme, url=f"https://hooks.example.com/{n}", events=["run.done"]) for n in "ab"]
    webhook_register(subject=globex, url="https://hooks.example.com/g", events=["run.completed"])
    tenant = Tenant.objects.get(slug="acme")

    listed = push_configs_of_tenant(tenant=tenant)
    assert [c.config_id for c in listed] == [c.config_id for c in reversed(configs)]
    limited = push_configs_of_tenant(tenant=tenant.pk, limit=2)
    assert [c.config_id for c in limited] == [configs[2].config_id, configs[1].config_id]
    assert [h.webhook_id for h in webhooks_of_tenant(tenant=tenant)] == [h.webhook_id for h in reversed(hooks)]
    globex_tenant = Tenant.objects.get(slug="globex")
    assert {c.tenant_id for c in push_configs_of_tenant(tenant=globex_tenant)} == {globex_tenant.pk}
    assert len(webhooks_of_tenant(tenant=globex_tenant)) == 1


def test_deliveries_come_with_attempts_in_two_queries(make_key: Any, django_assert_num_queries: Any) -> None:
    acme, globex = _subject(make_key, "acme"), _subject(make_key, "globex")
    run = _run(acme)
    config = push_config_create(subject=acme, task_id=run.run_id, url="https://hooks.example.com/a")
    hook = webhook_register(subject=acme, url="https://hooks.example.com/w", events=["run.completed"])
    other_hook = webhook_register(subject=acme, url="https://hooks.example.com/o", events=["run.completed"])
    for n in range(3):
        _delivery(run, f"cfg-{n}", config=config)
        _delivery(run, f"hook-{n}", webhook=hook)
    _delivery(run, "other-hook", webhook=other_hook)
    globex_run = _run(globex)
    globex_config = push_config_create(subject=globex, task_id=globex_run.run_id, url="https://hooks.example.com/g")
    _delivery(globex_run, "globex-cfg", config=globex_config)

    with django_assert_num_queries(2):  # deliveries + one prefetch of every attempt
        by_task = task_push_deliveries(run=run)
        assert [[a.number for a in d.attempt_rows.all()] for d in by_task] == [[1, 2]] * 3
    assert [d.delivery_id for d in by_task] == ["cfg-2", "cfg-1", "cfg-0"]
    with django_assert_num_queries(2):
        by_hook = webhook_deliveries(webhook=hook, limit=2)
        assert [(d.delivery_id, d.run.run_id, len(d.attempt_rows.all())) for d in by_hook] == [
            ("hook-2", run.run_id, 2),
            ("hook-1", run.run_id, 2),
        ]
    assert [d.delivery_id for d in task_push_deliveries(run=globex_run)] == ["globex-cfg"]
