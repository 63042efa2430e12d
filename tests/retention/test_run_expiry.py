"""Runs expire after their window, tenant by tenant, in batches: then every door answers for them
exactly as for a task that never existed; a legal hold, a longer override or a run still going
keeps them (issue 36 item 1)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.a2a.models import TaskMessage
from apps.push.models import Delivery, PushConfig
from apps.retention.services import batch_rest, retention_apply, retention_set
from apps.runs.models import Interrupt, Run, RunEvent, RunTally
from apps.tenants.models import Tenant
from tests.retention.conftest import Doors, advance, ended_days_ago, never_existing

pytestmark = pytest.mark.django_db

HOOK = "https://receiver.example/hooks/a2a"


@pytest.fixture(autouse=True)
def public_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    # No network here: the receiver's name resolves to a public address (as tests/a2a/test_push_configs.py).
    monkeypatch.setattr("apps.core.egress.resolve_host", lambda host, port: [ipaddress.ip_address("93.184.216.34")])


def _ended_task(doors: Doors, message_id: str) -> str:
    """An A2A task with a message, a push config, an interrupt and its deliveries, then cancelled."""
    message = {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"text": "hi"}],
        "metadata": {"openwop": {"skillId": "conformance-approval"}},
    }  # named: the default is echo
    sent = doors.a2a_rpc("SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    task_id = sent.json()["result"]["task"]["id"]  # type: ignore[attr-defined]
    created = doors.a2a_rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK})
    assert "error" not in created.json(), created.content  # type: ignore[attr-defined]
    assert advance(task_id).status.startswith("waiting-")  # an interrupt row now hangs off it
    doors.a2a_rpc("CancelTask", {"id": task_id})
    assert Run.unscoped_all_tenants.get(run_id=task_id).status == "cancelled"
    return task_id


def _rows_of(run_pk: int) -> dict[str, int]:
    return {
        "events": RunEvent.unscoped_all_tenants.filter(run_id=run_pk).count(),
        "interrupts": Interrupt.unscoped_all_tenants.filter(run_id=run_pk).count(),
        "messages": TaskMessage.unscoped_all_tenants.filter(run_id=run_pk).count(),
        "push configs": PushConfig.unscoped_all_tenants.filter(run_id=run_pk).count(),
        "deliveries": Delivery.unscoped_all_tenants.filter(run_id=run_pk).count(),
    }


def _tally(slug: str) -> int:
    return sum(RunTally.unscoped_all_tenants.filter(tenant__slug=slug).values_list("runs", flat=True))


def test_an_expired_run_answers_as_one_that_never_existed_on_every_door(doors_for) -> None:  # type: ignore[no-untyped-def]
    acme = doors_for("acme")
    task_id = _ended_task(acme, "m-expire")
    run_pk = Run.unscoped_all_tenants.get(run_id=task_id).pk
    assert all(_rows_of(run_pk).values()), _rows_of(run_pk)  # something hangs off it on every table
    now = timezone.now()
    ended_days_ago(task_id, 30.5, now=now)  # the host's window is 30 days

    unknown = acme.answers(never_existing("acme"))
    before = acme.answers(task_id)
    for door, answer in before.items():
        assert answer[0] == 200 and answer != unknown[door], door
    assert _tally("acme") == 1

    report = retention_apply(now)

    assert (report.runs_expired, report.run_batches) == (1, 1)
    assert acme.answers(task_id) == unknown
    assert set(_rows_of(run_pk).values()) == {0}
    assert _tally("acme") == 0
    listed = acme.a2a_rpc("ListTasks", {}).json()["result"]  # type: ignore[attr-defined]
    assert listed["tasks"] == [] and listed["totalSize"] == 0


def test_windows_overrides_and_legal_hold(doors_for) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    acme, globex, initech = doors_for("acme"), doors_for("globex"), doors_for("initech")
    retention_set(tenant=Tenant.objects.get(slug="globex"), legal_hold=True, actor="test")
    retention_set(tenant=Tenant.objects.get(slug="initech"), runs_days=400, actor="test")
    due = _ended_task(acme, "m-due")
    ended_days_ago(due, 31, now=now)
    young = _ended_task(acme, "m-young")
    ended_days_ago(young, 29, now=now)
    held = _ended_task(globex, "m-held")
    ended_days_ago(held, 4000, now=now)
    longer = _ended_task(initech, "m-longer")
    ended_days_ago(longer, 399, now=now)
    message = {"messageId": "m-going", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    going = acme.a2a_rpc("SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    going_id = going.json()["result"]["task"]["id"]  # type: ignore[attr-defined]
    Run.unscoped_all_tenants.filter(run_id=going_id).update(created_at=now - dt.timedelta(days=4000))

    report = retention_apply(now)

    assert report.runs_expired == 1 and report.held_tenants == ["globex"]
    kept = set(Run.unscoped_all_tenants.values_list("run_id", flat=True))
    assert kept == {young, held, longer, going_id}
    assert globex.answers(held)["a2a jsonrpc GetTask"][0] == 200

    # The hold lifted, the globex run goes on the next pass; initech's once its own window is over.
    retention_set(tenant=Tenant.objects.get(slug="globex"), legal_hold=False, actor="test")
    assert retention_apply(now).runs_expired == 1
    assert retention_apply(now).runs_expired == 0  # idempotent
    ended_days_ago(longer, 401, now=now)
    assert retention_apply(now).runs_expired == 1
    assert set(Run.unscoped_all_tenants.values_list("run_id", flat=True)) == {young, going_id}


def test_runs_expire_in_bounded_batches_that_give_way(doors_for, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_BATCH_RUNS = 2
    settings.OPENWOP_RETENTION_RUNS_DUTY = 0.5
    acme = doors_for("acme")
    now = timezone.now()
    for n in range(5):
        ended_days_ago(_ended_task(acme, f"m-{n}"), 31 + n, now=now)
    rests: list[float] = []
    monkeypatch.setattr("apps.retention.services.time.sleep", rests.append)  # the job's rests, not waited out

    with CaptureQueriesContext(connection) as seen:
        report = retention_apply(now)

    assert (report.runs_expired, report.run_batches) == (5, 3)
    assert not Run.unscoped_all_tenants.exists()
    # Each batch commits without waiting for its WAL flush, then rests as long as it worked (duty 0.5).
    assert [q["sql"] for q in seen.captured_queries].count("SET LOCAL synchronous_commit = off") == 3
    assert len(rests) == 3 and all(rest > 0 for rest in rests)
    # A run's children are found by the batch's ids through their run_id index, never by joining
    # `runs_run` (that plan scanned every event of the table on every batch).
    purges = [q["sql"] for q in seen.captured_queries if q["sql"].startswith(("DELETE", "UPDATE"))]
    assert sum(sql.startswith('DELETE FROM "runs_runevent" WHERE "run_id" = ANY(') for sql in purges) == 3
    joined = [sql for sql in purges if 'FROM "runs_run" WHERE' in sql and not sql.startswith('DELETE FROM "runs_run"')]
    assert not joined


def test_the_rest_after_a_batch_keeps_the_job_to_its_duty() -> None:
    assert batch_rest(0.2, 0.25) == pytest.approx(0.6)  # works a quarter of the time
    assert batch_rest(0.2, 0.5) == pytest.approx(0.2)
    assert batch_rest(0.2, 1.0) == 0


def test_the_run_log_stays_append_only_outside_the_job(doors_for) -> None:  # type: ignore[no-untyped-def]
    acme = doors_for("acme")
    now = timezone.now()
    ended_days_ago(_ended_task(acme, "m-old"), 31, now=now)
    kept = _ended_task(acme, "m-new")
    assert retention_apply(now).runs_expired == 1
    # In the same transaction as the pass (a test's): the sanctioned delete ended with its batch.
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        RunEvent.unscoped_all_tenants.filter(run__run_id=kept).delete()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Run.unscoped_all_tenants.filter(run_id=kept).delete()  # the cascade reaches its log
    assert RunEvent.unscoped_all_tenants.filter(run__run_id=kept).exists()


def test_a_deliverys_event_cannot_go_from_under_it(doors_for) -> None:  # type: ignore[no-untyped-def]
    """`push_delivery.event_id` has no foreign key in the database (retention's COMMIT checked it
    for every expired event): the run log's trigger is what keeps a delivery's event there."""
    acme = doors_for("acme")
    kept = _ended_task(acme, "m-delivered")
    delivery = Delivery.unscoped_all_tenants.filter(run__run_id=kept).first()
    assert delivery is not None and delivery.event.run_id == delivery.run_id
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_runevent WHERE id = %s", [delivery.event_id])
    assert RunEvent.unscoped_all_tenants.filter(pk=delivery.event_id).exists()


def test_apply_at_an_instant_is_idempotent(doors_for) -> None:  # type: ignore[no-untyped-def]
    acme = doors_for("acme")
    now = timezone.now()
    for n in range(3):
        ended_days_ago(_ended_task(acme, f"m-{n}"), 30 + n, now=now)  # the first ends exactly at the cutoff
    at = now.isoformat()

    first, second = StringIO(), StringIO()
    call_command("retention", "apply", "--now", at, stdout=first)
    call_command("retention", "apply", "--now", at, stdout=second)

    assert f"retention applied as of {at}" in first.getvalue()
    assert "runs expired: 2 in 1 batches" in first.getvalue()
    assert "runs expired: 0 in 0 batches" in second.getvalue()
    assert Run.unscoped_all_tenants.count() == 1


def test_beat_runs_the_pass_hourly_and_a_refusal_waits_for_the_next(doors_for, settings) -> None:  # type: ignore[no-untyped-def]
    from apps.retention.tasks import retention_apply_task
    from openwop_host.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["retention-apply"]
    assert entry == {"task": "retention.apply", "schedule": 3600.0} and entry["task"] in app.tasks
    acme = doors_for("acme")
    now = timezone.now()
    ended_days_ago(_ended_task(acme, "m-beat"), 31, now=now)

    refused = retention_apply_task(now=(now + dt.timedelta(days=2)).isoformat())
    assert len(refused) == 1 and refused[0].startswith("refused: ") and Run.unscoped_all_tenants.count() == 1
    assert "runs expired: 1 in 1 batches" in retention_apply_task(now=now.isoformat())
    assert not Run.unscoped_all_tenants.exists()


def _stats(table: str) -> tuple[object, object, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT last_vacuum, last_analyze, vacuum_count FROM pg_stat_user_tables WHERE relname = %s", [table]
        )
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_the_pass_vacuums_and_analyzes_what_it_deleted_from(doors_for) -> None:  # type: ignore[no-untyped-def]
    # issue 51 item 4: the job no longer leaves what it emptied to autovacuum's leisure.
    acme = doors_for("acme")
    now = timezone.now()
    ended_days_ago(_ended_task(acme, "m-vacuum"), 31, now=now)
    before = {table: _stats(table) for table in ("runs_run", "runs_runevent")}

    report = retention_apply(now)

    assert report.runs_expired == 1 and not report.vacuum_skipped
    assert {"runs_run", "runs_runevent"} <= set(report.vacuumed)
    for table, (last_vacuum, last_analyze, count) in before.items():
        after = _stats(table)
        assert after[2] == count + 1, table  # one more (manual) VACUUM
        assert after[0] is not None and (last_vacuum is None or after[0] > last_vacuum), table
        assert after[1] is not None and (last_analyze is None or after[1] > last_analyze), table
    assert "vacuumed: " in report.lines()[-1] and "runs_run" in report.lines()[-1]

    again = retention_apply(now)  # nothing deleted: nothing vacuumed
    assert (again.vacuumed, again.analyzed) == ([], [])
    assert _stats("runs_run")[2] == before["runs_run"][2] + 1


def test_inside_a_transaction_the_pass_analyzes_and_says_vacuum_was_skipped(doors_for) -> None:  # type: ignore[no-untyped-def]
    acme = doors_for("acme")
    now = timezone.now()
    ended_days_ago(_ended_task(acme, "m-in-tx"), 31, now=now)

    report = retention_apply(now)

    assert report.vacuum_skipped and report.vacuumed == [] and "runs_run" in report.analyzed
    assert "(skipped: inside a transaction)" in report.lines()[-1]
