"""Workers claim runs from PostgreSQL, fairly across tenants and under each tenant's cap of runs in
progress (engine.run_claim_next); the sweeper wakes workers only for what is lost
(engine.run_sweep_stale). docs/contributors/run-executor.md."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.runs import engine
from apps.runs.engine import Claimed, run_claim_next, run_sweep_stale
from apps.runs.models import Run, RunStatus
from apps.runs.services import run_create
from apps.tenants.models import Tenant, TenantBudget
from tests.runs.conftest import Caller, advance, event_types


@pytest.fixture(autouse=True)
def _round_robin_from_the_start(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """This process's round-robin position starts before every tenant, whatever ran before."""
    monkeypatch.setattr(engine, "_claimed_after", 0)


def _queued(caller: Caller, count: int, workflow_id: str = "conformance-noop") -> list[str]:
    """`count` runs handed to the workers (pending, unleased, due), oldest first."""
    return [
        run_create(subject=caller.subject, workflow_id=workflow_id, inputs=None, transport="rest").run_id
        for _ in range(count)
    ]


def _claim(worker: str = "w") -> Claimed | None:
    return run_claim_next(worker=worker, queue=settings.CELERY_TASK_DEFAULT_QUEUE)


def _claims(count: int) -> list[str]:
    """The run ids of up to `count` successive claims (fewer when nothing is left to claim)."""
    claimed = []
    for n in range(count):
        got = _claim(f"w{n}")
        if got is None:
            break
        claimed.append(got.run_id)
    return claimed


def _in_progress(caller: Caller) -> int:
    return Run.unscoped_all_tenants.filter(tenant__slug=caller.tenant).exclude(lease_owner="").count()


def _age(run_ids: list[str], *, minutes: int) -> None:
    """The runs were created and sent `minutes` ago, and have been claimable since."""
    then = timezone.now() - timedelta(minutes=minutes)
    Run.unscoped_all_tenants.filter(run_id__in=run_ids).update(enqueued_at=then, wake_at=then)


@pytest.mark.django_db
def test_a_tenant_with_one_run_is_served_within_the_first_claims_of_a_long_backlog(
    acme: Caller, globex: Caller, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 0  # no cap: the order alone is fair
    backlog = _queued(acme, 30)
    [lone] = _queued(globex, 1)  # queued last, behind all of acme's
    first = _claims(2)
    assert lone in first and len(set(first) & set(backlog)) == 1
    # Then acme's, oldest first, one claim each.
    assert _claims(5) == backlog[1:6]


@pytest.mark.django_db
def test_claims_take_turns_between_tenants(acme: Caller, globex: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 0
    acme_runs, globex_runs = _queued(acme, 5), _queued(globex, 5)
    claimed = _claims(10)
    tenants = [run_id.partition("/")[0] for run_id in claimed]
    assert all(a != b for a, b in itertools.pairwise(tenants)), tenants  # never twice in a row
    assert sorted(claimed) == sorted(acme_runs + globex_runs)


@pytest.mark.django_db
def test_a_tenant_never_exceeds_its_cap_and_the_others_still_claim(acme: Caller, globex: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 3
    _queued(acme, 10)
    [lone] = _queued(globex, 1)
    claimed = _claims(10)
    assert len(claimed) == 4 and lone in claimed  # acme's three, then nothing of acme's is claimable
    assert _in_progress(acme) == 3
    assert _claim() is None
    # One of acme's finishes (its lease is given back): exactly one more of acme's is claimable.
    Run.unscoped_all_tenants.filter(run_id=claimed[0] if claimed[0] != lone else claimed[1]).update(
        status=RunStatus.COMPLETED, completed_at=timezone.now(), lease_owner="", lease_expires_at=None
    )
    assert len(_claims(5)) == 1 and _in_progress(acme) == 3


@pytest.mark.django_db
def test_an_expired_lease_does_not_count_against_the_cap(acme: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    """A dead worker's runs are not in progress: they do not keep the tenant at its cap."""
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 2
    _queued(acme, 4)
    assert len(_claims(4)) == 2
    Run.unscoped_all_tenants.exclude(lease_owner="").update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert len(_claims(4)) == 2


@pytest.mark.django_db
def test_the_tenants_own_budget_overrides_the_host_default(acme: Caller, globex: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 2
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_in_progress=5)
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="globex"), runs_in_progress=None)  # the default
    _queued(acme, 8)
    _queued(globex, 8)
    _claims(20)
    assert (_in_progress(acme), _in_progress(globex)) == (5, 2)


@pytest.mark.django_db
def test_a_budget_of_zero_is_unlimited(acme: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 2
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_in_progress=0)
    _queued(acme, 12)
    assert len(_claims(20)) == 12 and _in_progress(acme) == 12


@pytest.mark.django_db
def test_a_parked_run_is_claimed_only_once_due(acme: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    [run_id] = _queued(acme, 1, "conformance-delay")
    Run.unscoped_all_tenants.filter(run_id=run_id).update(wake_at=timezone.now() + timedelta(minutes=1))
    assert _claim() is None
    Run.unscoped_all_tenants.filter(run_id=run_id).update(wake_at=timezone.now() - timedelta(seconds=1))
    claimed = _claim()
    assert claimed is not None and claimed.run_id == run_id


@pytest.mark.django_db
def test_a_row_written_by_the_previous_release_is_due_at_once(acme: Caller) -> None:
    """Its INSERT does not name `wake_at`: the column's database default makes it claimable."""
    [run_id] = _queued(acme, 1)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET wake_at = DEFAULT WHERE run_id = %s", [run_id])
    assert Run.unscoped_all_tenants.get(run_id=run_id).wake_at.year == 1970
    claimed = _claim()
    assert claimed is not None and claimed.run_id == run_id


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_take_a_tenant_past_its_cap(acme: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 3
    _queued(acme, 20)
    start = threading.Barrier(8)
    claimed: list[str] = []

    def claimer(n: int) -> None:
        try:
            start.wait(timeout=30)
            while (got := _claim(f"t{n}")) is not None:
                claimed.append(got.run_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(claimed) == 3 and _in_progress(acme) == 3


# ---------------------------------------------------------------------------------------------
# The sweeper


@pytest.mark.django_db
def test_a_run_queued_and_unclaimed_within_its_claim_window_is_never_resent(acme: Caller, sent_advances) -> None:  # type: ignore[no-untyped-def]
    run_ids = _queued(acme, 5)
    Run.unscoped_all_tenants.filter(run_id__in=run_ids).update(
        enqueued_at=timezone.now() - timedelta(seconds=settings.OPENWOP_RUN_LEASE_SECONDS / 2)
    )
    sent_advances.clear()
    for _ in range(3):
        assert run_sweep_stale(capacity=16) == []
    assert sent_advances == []


@pytest.mark.django_db
def test_a_lost_run_is_resent_once_per_claim_window(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:  # type: ignore[no-untyped-def]
    [run_id] = _queued(acme, 1)
    _age([run_id], minutes=5)
    sent_advances.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale(capacity=16) == [run_id]
        assert run_sweep_stale(capacity=16) == []  # sent: its window starts again
    assert sent_advances == [([run_id], settings.CELERY_TASK_DEFAULT_QUEUE)]


@pytest.mark.django_db
def test_a_backlog_never_multiplies_wake_ups(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, settings
) -> None:  # type: ignore[no-untyped-def]
    """A long queue past its claim window: wake-ups go out for the idle threads only, none while
    every thread is busy (each claims the next run as it finishes)."""
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 0
    backlog = _queued(acme, 40)
    _age(backlog, minutes=5)
    sent_advances.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale(capacity=0) == []  # every thread busy
        assert len(run_sweep_stale(capacity=3)) == 3  # three idle threads
    assert len(sent_advances) == 3


@pytest.mark.django_db
def test_a_run_waiting_for_its_tenants_turn_is_not_resent(
    acme: Caller, globex: Caller, sent_advances, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_IN_PROGRESS = 2
    acme_runs = _queued(acme, 6)
    assert len(_claims(2)) == 2  # acme at its cap, four waiting their turn
    [lost] = _queued(globex, 1)
    _age([*acme_runs, lost], minutes=5)
    assert run_sweep_stale(capacity=16) == [lost]


@pytest.mark.django_db
def test_an_expired_lease_is_freed_and_claimed_again(acme: Caller, sent_advances) -> None:  # type: ignore[no-untyped-def]
    """A worker died holding a run: the sweeper frees it (whatever its capacity) and a claim takes it."""
    [run_id] = _queued(acme, 1)
    claimed = _claim("dead-worker")
    assert claimed is not None and claimed.run_id == run_id
    assert _claim("live-worker") is None  # its lease is live: nobody else claims it
    Run.unscoped_all_tenants.filter(run_id=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert run_sweep_stale(capacity=0) == []  # freed, no thread idle to wake
    assert Run.unscoped_all_tenants.get(run_id=run_id).lease_owner == ""
    again = _claim("live-worker")
    assert again is not None and again.run_id == run_id
    assert advance(run_id, worker="live-worker").status == RunStatus.COMPLETED
    assert event_types(run_id) == ["run.started", "node.started", "node.completed", "run.completed"]


@pytest.mark.django_db
def test_a_run_another_release_cancelled_while_parked_is_due_at_once(acme: Caller, sent_advances) -> None:  # type: ignore[no-untyped-def]
    """The previous release's cancel marks a running run `cancelling` and sends a wake-up, with
    no thought of `wake_at`: the sweeper makes it due, and a claim finishes the cancel."""
    [run_id] = _queued(acme, 1, "conformance-cancellable")
    assert advance(run_id).wake_at > timezone.now()  # parked
    Run.unscoped_all_tenants.filter(run_id=run_id).update(status=RunStatus.CANCELLING, cancel_reason="old release")
    assert _claim() is None
    run_sweep_stale(capacity=0)
    claimed = _claim()
    assert claimed is not None and claimed.run_id == run_id
    assert advance(run_id, worker="w").status == RunStatus.CANCELLED
    assert event_types(run_id)[-2:] == ["node.cancelled", "run.cancelled"]
