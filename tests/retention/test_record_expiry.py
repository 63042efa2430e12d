"""Records expire with the retention pass: whole partitions dropped when every tenant in them may
lose their records, a held tenant's kept, the daily rollups unchanged; with an archive configured
nothing expires before it is exported, and a failed export refuses the pass (issue 36)."""

from __future__ import annotations

import datetime as dt
import gzip
from collections import Counter
from io import StringIO
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from apps.audit.chainer import chain_pending
from apps.audit.models import ArchiveExport, HostEvent, HostEventStream, NegotiationDailyCount
from apps.audit.partitions import records_partitions_ensure
from apps.audit.verify import chain_verify
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.retention.services import retention_apply, retention_set
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db


def _records(tenant: Tenant, count: int, *, at: dt.datetime, subject: str = "s") -> None:
    """`count` negotiation records of `tenant` written at `at` (one multi-row INSERT, as the group
    commit issues; the instant is the test's, so the records are as old as it says), with their
    stream's counter moved as a writer that does not chain moves it: the chainer links them
    (apps/audit/chainer.py) before anything is exported or expires."""
    start = HostEvent.unscoped_all_tenants.filter(tenant=tenant, subject_id=subject).count() + 1
    HostEventStream.unscoped_all_tenants.get_or_create(tenant=tenant, subject_id=subject)
    HostEventStream.unscoped_all_tenants.filter(tenant=tenant, subject_id=subject).update(
        last_sequence=start + count - 1
    )
    HostEvent.unscoped_all_tenants.bulk_create(
        HostEvent(
            tenant=tenant,
            subject_id=subject,
            subject={"subjectId": subject},
            event_id=f"evt-{tenant.slug}-{subject}-{n:012d}",
            type=NEGOTIATION_EVENT,
            payload={"protocol": "a2a", "outcome": "accepted", "version": "1.0", "requested": "1.0"},
            durable=True,
            sequence=n,
            at=at,
        )
        for n in range(start, start + count)
    )
    with connection.cursor() as cursor:  # checked now, as a writer's commit would: no pending check blocks a DROP
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _kept(slug: str) -> Counter[dt.date]:
    instants = HostEvent.unscoped_all_tenants.filter(tenant__slug=slug).values_list("at", flat=True)
    return Counter(at.date() for at in instants)


def _rollup() -> list[tuple[object, ...]]:
    return sorted(NegotiationDailyCount.unscoped_all_tenants.values_list("day", "tenant__slug", "outcome", "count"))


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE tablename ~ '^audit_hostevent_[ph][0-9]'")
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture
def tenants(db) -> dict[str, Tenant]:  # type: ignore[no-untyped-def]
    return {slug: tenant_get_or_create(slug=slug)[0] for slug in ("acme", "globex")}


@pytest.fixture
def now() -> dt.datetime:
    """Midday, so the records below sit well inside their days' partitions."""
    return timezone.now().replace(hour=12, minute=0, second=0, microsecond=0) - dt.timedelta(days=1)


def test_records_expire_by_partition_and_a_hold_keeps_them(tenants, now, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RECORDS_DAYS = 90
    old, young = now - dt.timedelta(days=100), now - dt.timedelta(days=10)
    records_partitions_ensure(now, since=old)
    _records(tenants["acme"], 30, at=old)
    _records(tenants["globex"], 20, at=old)
    _records(tenants["acme"], 5, at=young)
    retention_set(tenant=tenants["globex"], legal_hold=True, actor="test")
    rollup = _rollup()
    old_partition = f"audit_hostevent_p{old:%Y%m%d}"
    assert old_partition in _tables()

    chain_pending()  # as the pass does first: the records as they will be kept, digests and all
    held_records = list(HostEvent.unscoped_all_tenants.filter(tenant=tenants["globex"]).order_by("sequence").values())
    held = retention_apply(now)

    # globex's hold no longer keeps the old partition: its records move aside into a replacement of
    # the same range, the partition is dropped whole (acme's 30 with it), acme's young stay.
    replacement = f"audit_hostevent_h{old:%Y%m%d}_1"
    assert old_partition in held.records.dropped and old_partition not in _tables()
    assert replacement in held.records.held and held.records.deleted == 0 and held.records.moved_aside == 20
    assert _kept("acme") == Counter({young.date(): 5}) and _kept("globex") == Counter({old.date(): 20})
    globex = HostEvent.unscoped_all_tenants.filter(tenant=tenants["globex"]).order_by("sequence").values()
    assert list(globex) == held_records  # readable as they were
    assert _rollup() == rollup
    verify = StringIO()
    call_command("audit_verify", "--tenant", "globex", stdout=verify)
    assert "intact: 20 records in 1 streams" in verify.getvalue(), verify.getvalue()
    assert "20 records moved aside" in "; ".join(held.lines())

    retention_set(tenant=tenants["globex"], legal_hold=False, actor="test")
    lifted = retention_apply(now)

    assert lifted.records.dropped == [replacement] and lifted.records.deleted == 0
    assert replacement not in _tables()  # dropped whole, not emptied
    assert _kept("globex") == Counter() and _kept("acme") == Counter({young.date(): 5})
    assert _rollup() == rollup  # the charts and the deprecation view keep their numbers
    assert chain_verify().intact  # what stays starts at the anchors the expiry moved
    again = retention_apply(now)
    assert (again.records.dropped, again.records.deleted, again.runs_expired) == ([], 0, 0)


def test_nothing_expires_before_it_is_exported(tenants, now, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RECORDS_DAYS = 90
    settings.OPENWOP_ARCHIVE_URL = (tmp_path / "archive").as_uri()
    old = now - dt.timedelta(days=100)
    records_partitions_ensure(now, since=old)
    _records(tenants["acme"], 12, at=old)
    _records(tenants["acme"], 3, at=now - dt.timedelta(days=1))
    retention_set(tenant=tenants["globex"], legal_hold=True, actor="test")

    report = retention_apply(now)

    [export] = ArchiveExport.unscoped_all_tenants.all()
    assert report.exports == [export.file_url] and export.tenant == tenants["acme"]
    midnight = (now - dt.timedelta(days=90)).replace(hour=0)  # one export a day, however often the job runs
    assert (export.since, export.until, export.count) == (None, midnight, 12)
    with gzip.open(Path(unquote(urlsplit(export.file_url).path)), "rt") as lines:
        assert len(lines.readlines()) == 12
    assert f"audit_hostevent_p{old:%Y%m%d}" in report.records.dropped  # with the empty days around it
    assert sum(_kept("acme").values()) == 3
    assert chain_verify(against=settings.OPENWOP_ARCHIVE_URL).intact  # the anchor is the export's head

    out = []
    for _ in range(2):  # idempotent: the second pass exports and expires nothing
        text = StringIO()
        call_command("retention", "apply", "--now", now.isoformat(), stdout=text)
        out.append(text.getvalue())
    assert ArchiveExport.unscoped_all_tenants.count() == 1
    assert out[0] == out[1].replace(out[1].splitlines()[0], out[0].splitlines()[0])  # all but the time taken
    assert "exports written: none" in out[0]


def test_a_failed_export_refuses_the_pass_and_nothing_expires(tenants, now, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RECORDS_DAYS = 90
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the archive folder should be")
    settings.OPENWOP_ARCHIVE_URL = blocked.as_uri()
    old = now - dt.timedelta(days=100)
    records_partitions_ensure(now, since=old)
    _records(tenants["acme"], 7, at=old)

    with pytest.raises(CommandError) as refused:
        call_command("retention", "apply", "--now", now.isoformat())

    assert refused.value.returncode == 2 and "export of acme's records failed" in str(refused.value)
    assert sum(_kept("acme").values()) == 7 and f"audit_hostevent_p{old:%Y%m%d}" in _tables()
    assert not ArchiveExport.unscoped_all_tenants.exists()
