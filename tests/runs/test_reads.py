"""The runs' hot reads (apps/runs/reads.py): one statement each, the same on the event loop's pool
and on Django's connection. A foreign tenant's run reads exactly as an unknown one; a page's cursor
continues the listing where it stopped, for its own tenant and order only; events after N are the
log's tail from N + 1, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from apps.core.async_db import async_pool_close
from apps.core.errors import NotFound, ValidationFailed
from apps.runs.models import Run, RunEvent
from apps.runs.reads import (
    RunFilters,
    RunOrder,
    events_after,
    events_after_sync,
    page_read,
    page_read_sync,
    snapshot_read,
    snapshot_read_sync,
)
from apps.tenants.models import Tenant
from tests.runs.conftest import Caller, advance

T = TypeVar("T")


def _tenant_pk(caller: Caller) -> int:
    return Tenant.objects.get(slug=caller.tenant).pk


def _on_the_pool(read: Callable[[], Awaitable[T]]) -> T:
    """`read` on a loop of its own, through the loop's pool (closed with it)."""

    async def once() -> T:
        try:
            return await read()
        finally:
            await async_pool_close()

    return asyncio.run(once())


@pytest.mark.django_db
def test_a_foreign_run_reads_as_not_found_like_an_unknown_one(acme: Caller, globex: Caller) -> None:
    mine, theirs = acme.create_run("conformance-approval"), globex.create_run("conformance-approval")
    advance(mine)
    snapshot = snapshot_read_sync(tenant_pk=_tenant_pk(acme), run_id=mine)
    assert (snapshot.run.run_id, snapshot.run.status, snapshot.run.workflow_id) == (
        mine,
        "waiting-approval",
        "conformance-approval",
    )
    assert snapshot.open_interrupt is not None and snapshot.open_interrupt.kind == "approval"
    assert snapshot.run.last_sequence == Run.unscoped_all_tenants.get(run_id=mine).last_sequence
    refusals = []
    for run_id in (theirs, "acme/" + "A" * 26, "not an id"):
        with pytest.raises(NotFound) as refused:
            snapshot_read_sync(tenant_pk=_tenant_pk(acme), run_id=run_id)
        refusals.append((type(refused.value), refused.value.message))
    assert len(set(refusals)) == 1  # one refusal, whatever the reason


@pytest.mark.django_db(transaction=True)
def test_the_pools_reads_scope_by_tenant_too(acme: Caller, globex: Caller) -> None:
    mine, theirs = acme.create_run("echo", {"x": 1}), globex.create_run("echo")
    tenant_pk = _tenant_pk(acme)
    snapshot = _on_the_pool(lambda: snapshot_read(tenant_pk=tenant_pk, run_id=mine))
    assert snapshot == snapshot_read_sync(tenant_pk=tenant_pk, run_id=mine)  # the same row, either connection
    with pytest.raises(NotFound):
        _on_the_pool(lambda: snapshot_read(tenant_pk=tenant_pk, run_id=theirs))
    page = _on_the_pool(lambda: page_read(tenant_pk=tenant_pk, tenant=acme.tenant, count_total=True))
    assert [s.run.run_id for s in page.snapshots] == [mine] and page.total_size == 1


@pytest.mark.django_db
def test_a_pages_cursor_continues_the_listing_for_its_tenant_and_order_only(acme: Caller, globex: Caller) -> None:
    created = [acme.create_run("echo", {"i": i}) for i in range(5)]
    globex.create_run("echo")
    tenant_pk = _tenant_pk(acme)
    seen: list[str] = []
    cursor = None
    while True:
        page = page_read_sync(tenant_pk=tenant_pk, tenant=acme.tenant, limit=2, cursor=cursor, count_total=True)
        assert page.total_size == 5 and len(page.snapshots) <= 2
        seen.extend(snapshot.run.run_id for snapshot in page.snapshots)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(created))  # newest first, each once, the other tenant's never
    first = page_read_sync(tenant_pk=tenant_pk, tenant=acme.tenant, limit=2)
    assert first.next_cursor is not None
    for tenant, order in ((globex.tenant, RunOrder.CREATED), (acme.tenant, RunOrder.UPDATED)):
        with pytest.raises(ValidationFailed):
            page_read_sync(tenant_pk=tenant_pk, tenant=tenant, order=order, cursor=first.next_cursor)
    with pytest.raises(ValidationFailed):
        page_read_sync(tenant_pk=tenant_pk, tenant=acme.tenant, limit=101)


@pytest.mark.django_db
def test_page_filters_admit_only_their_runs(acme: Caller) -> None:
    waiting = acme.create_run("conformance-approval")
    advance(waiting)
    pending = acme.create_run("echo")
    tenant_pk = _tenant_pk(acme)

    def listed(filters: RunFilters) -> tuple[list[str], int | None]:
        page = page_read_sync(tenant_pk=tenant_pk, tenant=acme.tenant, filters=filters, count_total=True)
        return [snapshot.run.run_id for snapshot in page.snapshots], page.total_size

    assert listed(RunFilters(statuses=("pending",))) == ([pending], 1)
    assert listed(RunFilters(workflow_id="conformance-approval")) == ([waiting], 1)
    assert listed(RunFilters(open_interrupt_kind="approval")) == ([waiting], 1)
    assert listed(RunFilters(exclude_open_interrupt_kind="approval")) == ([pending], 1)
    assert listed(RunFilters(context_id=pending)) == ([pending], 1)  # no context: its runId stands in
    assert listed(RunFilters(statuses=("completed",))) == ([], 0)


@pytest.mark.django_db
def test_events_after_n_are_the_logs_tail_in_order(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    log = list(RunEvent.unscoped_all_tenants.filter(run=run).order_by("sequence"))
    assert len(log) >= 3
    for after in (0, 1, len(log) - 1, len(log)):
        events = events_after_sync(tenant_pk=run.tenant_id, run_pk=run.pk, after=after)
        expected = [(e.sequence, e.event_id, e.type, e.payload, e.node_id, e.at) for e in log[after:]]
        assert [(e.sequence, e.event_id, e.type, e.payload, e.node_id, e.at) for e in events] == expected
    other_tenant = Tenant.objects.exclude(pk=run.tenant_id).values_list("pk", flat=True).first() or run.tenant_id + 1
    assert events_after_sync(tenant_pk=other_tenant, run_pk=run.pk, after=0) == []


@pytest.mark.django_db(transaction=True)
def test_events_after_on_the_pool_are_the_same_events(acme: Caller) -> None:
    run_id = acme.create_run("echo", {"x": "é"})
    advance(run_id)
    run = Run.unscoped_all_tenants.get(run_id=run_id)

    def fields(events: list[RunEvent]) -> list[tuple[Any, ...]]:
        return [(e.pk, e.sequence, e.event_id, e.type, e.payload, e.node_id, e.at) for e in events]

    on_pool = _on_the_pool(lambda: events_after(tenant_pk=run.tenant_id, run_pk=run.pk, after=1))
    assert fields(on_pool) == fields(events_after_sync(tenant_pk=run.tenant_id, run_pk=run.pk, after=1))
    assert [e.sequence for e in on_pool] == list(range(2, run.last_sequence + 1))
