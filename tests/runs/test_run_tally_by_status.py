"""Filtered totals from the tally (issue 18): `reads.page_read(count_total=True)` filtered by status reads the
tenant's per-status tally (RunTally, kept by PostgreSQL triggers), never a COUNT over runs_run, and
stays exact across creations (concurrent ones included), status transitions by any path, and
deletes, in the caller's tenant only."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.ids import mint_opaque
from apps.runs.models import Run, RunStatus, RunTally
from apps.runs.reads import RunFilters, page_read_sync
from apps.runs.services import interrupt_resolve, run_cancel, run_create
from apps.tenants.models import Tenant
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db(transaction=True)


def _total(caller: Caller, *statuses: str) -> int:
    tenant_pk = Tenant.objects.get(slug=caller.tenant).pk
    filters = RunFilters(statuses=tuple(statuses) or None)
    page = page_read_sync(tenant_pk=tenant_pk, tenant=caller.tenant, filters=filters, count_total=True, limit=1)
    assert page.total_size is not None
    return page.total_size


def _rows(caller: Caller, *statuses: str) -> int:
    runs = Run.unscoped_all_tenants.filter(tenant__slug=caller.tenant)
    return (runs.filter(status__in=statuses) if statuses else runs).count()


def _assert_exact(caller: Caller) -> None:
    for status in RunStatus.values:
        assert _total(caller, status) == _rows(caller, status), status
    assert _total(caller) == _rows(caller)
    waiting = (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT, RunStatus.COMPLETED)
    assert _total(caller, *waiting) == _rows(caller, *waiting)


def _create(caller: Caller, workflow_id: str, **kwargs: Any) -> Run:
    return run_create(subject=caller.subject, workflow_id=workflow_id, inputs={}, transport="rest", **kwargs)


def test_filtered_totals_are_exact_across_transitions_and_deletes(acme: Caller, globex: Caller) -> None:
    pending = _create(acme, "conformance-noop")  # queued: pending
    _create(acme, "conformance-noop", inline=True)  # completed in its one transaction
    _create(acme, "conformance-failure", inline=True)  # failed
    waiting = _create(acme, "conformance-approval", inline=True)  # waiting-approval
    queued_approval = _create(acme, "conformance-approval")
    for _ in range(3):
        _create(globex, "conformance-noop", inline=True)  # another tenant: never in acme's totals
    _assert_exact(acme)
    assert _total(acme, RunStatus.COMPLETED) == 1 and _total(globex, RunStatus.COMPLETED) == 3

    advance(queued_approval.run_id)  # pending -> running -> waiting-approval, on a worker
    interrupt_resolve(subject=acme.subject, run_id=waiting.run_id, node_id="approve", resume_value={"action": "accept"})
    _assert_exact(acme)  # running, until a worker finishes it
    advance(waiting.run_id)
    run_cancel(subject=acme.subject, run_id=pending.run_id)
    _assert_exact(acme)
    assert _total(acme, RunStatus.CANCELLED) == 1 and _total(acme, RunStatus.PENDING) == 0

    # Rows changed and removed outside the services (admin, bulk SQL) count too.
    Run.unscoped_all_tenants.filter(pk=queued_approval.pk).update(status=RunStatus.WAITING_INPUT)
    template = Run.unscoped_all_tenants.get(pk=pending.pk)
    copies = []
    for _ in range(2):
        template.pk, template.run_id = None, f"acme/{mint_opaque()}"
        template.save(force_insert=True)
        copies.append(template.pk)
    _assert_exact(acme)
    Run.unscoped_all_tenants.filter(pk__in=copies).update(status=RunStatus.FAILED)
    _assert_exact(acme)
    Run.unscoped_all_tenants.filter(pk__in=copies).delete()  # no events: deletable even on PostgreSQL
    _assert_exact(acme)
    assert _total(globex) == 3 == _rows(globex)


def test_concurrent_creations_are_all_counted(acme: Caller) -> None:
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def create(inline: bool) -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(3):
                _create(acme, "conformance-noop", inline=inline)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert _total(acme) == 12
    assert _total(acme, RunStatus.COMPLETED) == 6 and _total(acme, RunStatus.PENDING) == 6
    _assert_exact(acme)


def test_a_filtered_total_reads_the_tally_not_the_runs(acme: Caller) -> None:
    tenant_pk = Tenant.objects.get(slug=acme.tenant).pk
    _create(acme, "conformance-noop", inline=True)
    _create(acme, "conformance-noop")
    assert sum(RunTally.objects.for_tenant(tenant_pk).values_list("completed", flat=True)) == 1
    for statuses in ([RunStatus.COMPLETED], [RunStatus.RUNNING, RunStatus.CANCELLING], None):
        with CaptureQueriesContext(connection) as ctx:
            assert _total(acme, *(statuses or ())) == _rows(acme, *(statuses or ()))
        sql = [q["sql"] for q in ctx.captured_queries]
        assert not any(re.search(r"COUNT\([^)]*\)\s+FROM\s+\"?runs_run\b", s, re.IGNORECASE) for s in sql), sql
        assert any("runs_runtally" in s and "SUM(" in s.upper() for s in sql), sql
