"""Time partitions of the records (issue 36 item 2): partitions are created ahead, records land in
theirs with the append-only and rollup triggers on every partition, and expiry drops whole
partitions (never a DELETE scan) unless a tenant still keeps records there; the rollups and the
hash chain survive it.

Real commits (`transaction=True`): partitions are attached, detached and dropped as the beat job
would, each step its own transaction. Records are written at chosen instants by the writers' own
statement (apps/audit/chain.py APPEND_SQL), so their chain is the real one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from apps.audit import partitions
from apps.audit.chain import APPEND_SQL, content_hash
from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.models import HostEvent, HostEventStream, NegotiationDailyCount, NegotiationPeerDaily
from apps.audit.partitions import records_default_repair, records_expire, records_partitions_ensure
from apps.audit.verify import chain_verify
from apps.core.ids import mint_opaque
from apps.tenants.subject import Subject

pytestmark = [pytest.mark.django_db(transaction=True)]


def _day(year: int, month: int, day: int, hour: int = 12) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def _record(subject: Subject, at: datetime, outcome: str = "accepted") -> None:
    """One `negotiation.decided` record written at `at`, through the writers' statement."""
    payload = {"protocol": "a2a", "outcome": outcome, "version": "1.0", "requested": "1.0", "peerDigest": "p1"}
    wire = subject.as_wire()
    event_id = mint_opaque()
    params = {
        "tenant_id": [subject.tenant_pk], "subject_id": [subject.subject_id], "subject": [json.dumps(wire)],
        "event_id": [event_id], "type": [NEGOTIATION_DECIDED], "payload": [json.dumps(payload)],
        "durable": [True], "ordinal": [1], "at": [at],
        "content": [content_hash(tenant=subject.tenant, subject_id=subject.subject_id, subject=wire,
                                 event_id=event_id, type=NEGOTIATION_DECIDED, durable=True, at=at, payload=payload)],
    }  # fmt: skip
    with transaction.atomic():
        HostEventStream.unscoped_all_tenants.bulk_create(
            [HostEventStream(tenant_id=subject.tenant_pk, subject_id=subject.subject_id)], ignore_conflicts=True
        )
        with connection.cursor() as cursor:
            cursor.execute(APPEND_SQL, params)
            assert cursor.fetchone() is not None


def _where(subject: Subject) -> dict[int, str]:
    """sequence -> the partition holding that record of the Subject's stream."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sequence, tableoid::regclass::text FROM audit_hostevent WHERE subject_id = %s ORDER BY sequence",
            [subject.subject_id],
        )
        return dict(cursor.fetchall())


def _tables(names: list[str]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [names])
        return sorted(row[0] for row in cursor.fetchall())


def _rows_of(tables: list[str]) -> list[tuple[str, int]]:
    """Every row of `tables` (its table and id): what stays must stay whole."""
    with connection.cursor() as cursor:
        rows: list[tuple[str, int]] = []
        for table in tables:
            cursor.execute(f"SELECT %s, id FROM {table} ORDER BY id", [table])
            rows += cursor.fetchall()
        return rows


def _of(year: int, names: list[str]) -> list[str]:
    """The partitions of `year` among `names` (an expiry also drops other tests' empty partitions)."""
    return [name for name in names if name.startswith(f"audit_hostevent_p{year}")]


def _rollups() -> list[tuple[Any, ...]]:
    daily = NegotiationDailyCount.unscoped_all_tenants.order_by("day", "tenant_id", "outcome")
    peers = NegotiationPeerDaily.unscoped_all_tenants.order_by("day", "tenant_id", "peer_digest")
    return [*daily.values_list("day", "tenant_id", "outcome", "count"),
            *peers.values_list("day", "tenant_id", "peer_digest", "count", "accepted")]  # fmt: skip


@pytest.fixture
def subjects(make_subject) -> Iterator[Callable[[str], Subject]]:  # type: ignore[no-untyped-def]
    yield lambda slug: make_subject(slug)[1]
    connection.close()


@override_settings(OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS=3)
def test_partitions_are_created_ahead_idempotently() -> None:
    now = _day(2031, 3, 10)
    created = records_partitions_ensure(now)
    assert created == [f"audit_hostevent_p2031031{d}" for d in range(4)]  # this interval and 3 ahead
    assert records_partitions_ensure(now) == []
    assert records_partitions_ensure(now + timedelta(days=1)) == ["audit_hostevent_p20310314"]
    bounds = {p.name: (p.lower, p.upper) for p in partitions.partitions()}
    assert bounds["audit_hostevent_p20310312"] == (_day(2031, 3, 12, 0), _day(2031, 3, 13, 0))
    with override_settings(OPENWOP_RECORDS_PARTITION_INTERVAL="weekly", OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS=21):
        # Up to the next existing partition, then whole ISO weeks (2031-03-17 is a Monday) to 21 days ahead.
        assert records_partitions_ensure(_day(2031, 3, 12)) == [f"audit_hostevent_p203103{d}" for d in (15, 17, 24, 31)]
        assert bounds_of("audit_hostevent_p20310315") == (_day(2031, 3, 15, 0), _day(2031, 3, 17, 0))
        assert bounds_of("audit_hostevent_p20310317") == (_day(2031, 3, 17, 0), _day(2031, 3, 24, 0))
    with override_settings(OPENWOP_RECORDS_PARTITION_INTERVAL="hourly"), pytest.raises(ValueError, match="daily"):
        records_partitions_ensure(now)


def bounds_of(name: str) -> tuple[datetime, datetime]:
    part = next(p for p in partitions.partitions() if p.name == name)
    return part.lower, part.upper


@override_settings(OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS=3)  # the partitions these name
def test_records_land_in_their_partition_under_every_trigger(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects("acme")
    records_partitions_ensure(_day(2032, 1, 10))
    _record(alice, _day(2032, 1, 10))
    _record(alice, _day(2032, 1, 11), outcome="refused")
    _record(alice, _day(2032, 6, 1))  # no partition covers it: the default one takes it
    assert _where(alice) == {
        1: "audit_hostevent_p20320110", 2: "audit_hostevent_p20320111", 3: "audit_hostevent_default"
    }  # fmt: skip
    # Rollups counted the records of every partition.
    assert {(str(r[0]), r[2], r[3]) for r in _rollups() if len(r) == 4} == {
        ("2032-01-10", "accepted", 1), ("2032-01-11", "refused", 1), ("2032-06-01", "accepted", 1),
    }  # fmt: skip
    # Append-only on each partition, addressed directly or through the parent.
    for sql in (
        "UPDATE audit_hostevent_p20320110 SET type = 'x.y'",
        "DELETE FROM audit_hostevent_default",
        "DELETE FROM audit_hostevent WHERE sequence = 2",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    assert HostEvent.unscoped_all_tenants.count() == 3
    # A range whose records already sit in the default partition is not created (ATTACH would fail).
    assert records_partitions_ensure(_day(2032, 6, 1)) == [f"audit_hostevent_p2032060{d}" for d in (2, 3, 4)]
    assert chain_verify().intact


@override_settings(OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS=3)  # the partitions these name
def test_expiry_drops_whole_partitions_and_keeps_rollups_and_chain(subjects) -> None:  # type: ignore[no-untyped-def]
    alice, bob, carol = subjects("acme"), subjects("acme"), subjects("globex")
    records_partitions_ensure(_day(2033, 2, 1))
    for day in (1, 2, 3):
        for _ in range(3):
            _record(alice, _day(2033, 2, day))
            _record(carol, _day(2033, 2, day), outcome="refused")
    for day in (1, 2):  # a second stream of the same tenant, wholly in the dropped partitions
        _record(bob, _day(2033, 2, day))
    kept = ["audit_hostevent_p20330203", "audit_hostevent_default"]
    rollups, kept_before = _rollups(), _rows_of(kept)
    keep_from = _day(2033, 2, 3, 0)  # both tenants: records before Feb 3 may go

    expiry = records_expire(_day(2033, 3, 1), keep=lambda tenant_pk: keep_from)

    # Feb 3 holds records both tenants keep; Feb 4, past and empty, goes too.
    assert _of(2033, expiry.dropped) == [f"audit_hostevent_p2033020{d}" for d in (1, 2, 4)]
    assert expiry.deleted == 0 and expiry.busy == [] and _of(2033, expiry.held) == ["audit_hostevent_p20330203"]
    assert _tables(expiry.dropped) == []  # detached and dropped, not emptied
    assert _rows_of(kept) == kept_before  # no row was DELETEd from what stays
    assert set(_where(alice).values()) == {"audit_hostevent_p20330203"}
    assert _tables(["audit_hostevent_p20330203"]) == ["audit_hostevent_p20330203"]
    assert sorted(_where(alice)) == [7, 8, 9]
    assert _rollups() == rollups  # the auditors' charts keep their numbers
    stream = HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id)
    assert stream.expired_through == 6 and stream.last_sequence == 9
    anchors = {s.subject_id: (s.expired_through, s.last_sequence) for s in HostEventStream.unscoped_all_tenants.all()}
    assert (anchors[bob.subject_id], anchors[carol.subject_id]) == ((2, 2), (6, 9))  # every stream anchored
    assert chain_verify().intact  # the kept records start from the anchor the expiry recorded
    again = records_expire(_day(2033, 3, 1), keep=lambda tenant_pk: keep_from)
    assert (again.dropped, again.deleted, again.streams_anchored) == ([], 0, 0)


@override_settings(OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS=3)  # the partitions these name
def test_legal_hold_keeps_a_partition_and_shorter_windows_go_in_batches(subjects, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(partitions, "BATCH", 2)  # several bounded batches out of a few records
    alice, carol = subjects("acme"), subjects("globex")
    records_partitions_ensure(_day(2034, 5, 1))
    _record(alice, _day(2020, 1, 1))  # in the default partition, long expired
    for day in (1, 2):
        for _ in range(3):
            _record(alice, _day(2034, 5, day))
            _record(carol, _day(2034, 5, day))
        _record(carol, _day(2034, 5, day))  # the held tenant has most of the rows: cheaper to delete the rest
    rollups = _rollups()
    windows = {alice.tenant_pk: _day(2034, 5, 2, 0), carol.tenant_pk: None}  # globex: legal hold

    expiry = records_expire(_day(2034, 6, 1), keep=windows.__getitem__)

    assert _of(2034, expiry.dropped) == ["audit_hostevent_p20340503", "audit_hostevent_p20340504"]  # empty
    assert expiry.held == ["audit_hostevent_p20340501", "audit_hostevent_p20340502"]
    assert expiry.deleted == 4  # acme's three of May 1 and its one in the default partition
    assert expiry.deleted_from == ["audit_hostevent_default", "audit_hostevent_p20340501"]  # the pass vacuums these
    assert _tables(expiry.held) == expiry.held
    assert sorted(_where(carol)) == [1, 2, 3, 4, 5, 6, 7, 8]  # nothing of a tenant on hold goes
    assert sorted(_where(alice)) == [5, 6, 7]
    stream = HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id)
    assert stream.expired_through == 4
    assert _rollups() == rollups
    assert chain_verify().intact


def test_a_stream_only_ever_loses_a_front_of_its_records(subjects) -> None:  # type: ignore[no-untyped-def]
    # Two writers took their instants across midnight in the other order than they got their
    # sequences: sequence 2 is on Jul 2, sequence 3 on Jul 1. Dropping Jul 1 whole would leave
    # sequence 2 below the anchor (3), which verify reports: expiry waits instead, front first.
    alice = subjects("acme")
    records_partitions_ensure(_day(2035, 7, 1))
    for at in (_day(2035, 7, 1), _day(2035, 7, 2, 0) + timedelta(microseconds=1),
               _day(2035, 7, 2, 0) - timedelta(microseconds=1), _day(2035, 7, 2)):  # fmt: skip
        _record(alice, at)

    def expire(keep_from: datetime) -> tuple[int, list[int]]:
        records_expire(_day(2035, 8, 1), keep=lambda tenant_pk: keep_from)
        assert chain_verify().intact  # after every pass: nothing at or below the anchor, no gap after it
        stream = HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id)
        return stream.expired_through, sorted(_where(alice))

    first = expire(_day(2035, 7, 2, 0))
    assert first == (1, [2, 3, 4])  # Jul 1 held: only sequence 1 goes
    assert expire(_day(2035, 7, 3, 0)) == (2, [3, 4])  # sequence 3 waits for 2, which goes from Jul 2
    assert expire(_day(2035, 7, 3, 0)) == (4, [])  # then both partitions are fronts: dropped whole
    assert _tables(["audit_hostevent_p20350701", "audit_hostevent_p20350702"]) == []


def test_a_held_tenants_records_move_aside_and_the_partition_is_dropped(subjects, make_subject) -> None:  # type: ignore[no-untyped-def]
    # issue 51 item 4: one tenant on legal hold no longer keeps the partition for everyone.
    alice, carol = subjects("acme"), subjects("globex")
    _drop_partitions_of(2036)
    records_partitions_ensure(_day(2036, 9, 1))
    for _ in range(4):
        _record(alice, _day(2036, 9, 1))
    for hour in (3, 9):
        _record(carol, _day(2036, 9, 1, hour))
    _record(carol, _day(2036, 9, 2))  # the held stream goes on in the next partition
    for _ in range(2):
        _record(alice, _day(2036, 9, 2))
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_hostevent WHERE tenant_id = %s ORDER BY sequence", [carol.tenant_pk])
        held_rows = cursor.fetchall()
    rollups = _rollups()
    windows = {alice.tenant_pk: _day(2036, 9, 3, 0), carol.tenant_pk: None}  # globex: legal hold

    expiry = records_expire(_day(2036, 10, 1), keep=windows.__getitem__)

    assert "audit_hostevent_p20360901" in expiry.dropped and _tables(["audit_hostevent_p20360901"]) == []
    assert expiry.deleted == 0 and expiry.moved_aside == 3 and expiry.busy == []
    assert {"audit_hostevent_p20360901", "audit_hostevent_p20360902"} <= set(expiry.dropped)
    kept = ["audit_hostevent_h20360901_1", "audit_hostevent_h20360902_1"]
    assert set(kept) <= set(expiry.held) and _tables(kept) == kept
    with connection.cursor() as cursor:  # ATTACH took the copy's own indexes: none built twice
        cursor.execute("SELECT indrelid::regclass::text, count(*) FROM pg_index WHERE indrelid = ANY(%s::regclass[])"
                       " GROUP BY 1", [["audit_hostevent", kept[0]]])  # fmt: skip
        counts = dict(cursor.fetchall())
        assert len(counts) == 2 and len(set(counts.values())) == 1, counts
    assert _where(alice) == {}  # the other tenant's expired records are gone
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_hostevent WHERE tenant_id = %s ORDER BY sequence", [carol.tenant_pk])
        assert cursor.fetchall() == held_rows  # every column of every held record, as it was
    assert _where(carol) == {1: "audit_hostevent_h20360901_1", 2: "audit_hostevent_h20360901_1",
                             3: "audit_hostevent_h20360902_1"}  # fmt: skip
    anchors = {s.subject_id: s.expired_through for s in HostEventStream.unscoped_all_tenants.all()}
    assert (anchors[alice.subject_id], anchors[carol.subject_id]) == (6, 0)
    assert _rollups() == rollups  # the copies were not counted again
    report = chain_verify()
    assert report.intact and not report.breaks
    # The replacement is an ordinary partition: append-only, and dropped whole once the hold lifts.
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_hostevent_h20360901_1")
    again = records_expire(_day(2036, 10, 1), keep=windows.__getitem__)
    assert (_of(2036, again.dropped), again.moved_aside, again.deleted) == ([], 0, 0)
    lifted = records_expire(_day(2036, 10, 1), keep=lambda tenant_pk: _day(2036, 9, 3, 0))
    assert set(kept) <= set(lifted.dropped) and _tables(kept) == [] and lifted.deleted == 0
    assert _where(carol) == {} and chain_verify().intact


def _drop_partitions_of(year: int) -> None:
    """A clean year (a database kept from an earlier run keeps its partitions: TRUNCATE leaves them)."""
    for part in partitions.partitions():
        if part.lower.year == year:
            with connection.cursor() as cursor:
                cursor.execute(f"ALTER TABLE audit_hostevent DETACH PARTITION {part.name}")
                cursor.execute(f"DROP TABLE {part.name}")


def _all_rows() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_hostevent ORDER BY id")
        return cursor.fetchall()


def test_a_week_without_beat_finds_partitions_and_repair_moves_the_default_partitions_records(subjects) -> None:  # type: ignore[no-untyped-def]
    # issue 51 item 4: partitions 10 days ahead (OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS), and
    # `records_partitions repair` for what landed in the default partition anyway.
    alice, carol = subjects("acme"), subjects("globex")
    _drop_partitions_of(2037)
    assert records_partitions_ensure(_day(2037, 3, 1))[-1] == "audit_hostevent_p20370311"
    _record(alice, _day(2037, 3, 8))  # a week after the last pass: still a partition of its own
    for day, hour in ((20, 3), (20, 9), (21, 1), (23, 5)):  # past every partition: the default one
        _record(alice, _day(2037, 3, day, hour))
        _record(carol, _day(2037, 3, day, hour))
    assert _where(alice) == {1: "audit_hostevent_p20370308", **dict.fromkeys(range(2, 6), "audit_hostevent_default")}
    rows, rollups = _all_rows(), _rollups()

    # As if it were Mar 20 noon: the doors may still write into Mar 20, which stays for now.
    early = records_default_repair(_day(2037, 3, 20))
    assert early.moved == {"audit_hostevent_p20370321": 2, "audit_hostevent_p20370323": 2}
    assert early.live == ["audit_hostevent_p20370320"] and early.left == 4 and early.busy == []
    call_command("records_partitions", "repair", stdout=(out := StringIO()))  # now: Mar 20 has ended
    assert "audit_hostevent_p20370320: 4 records moved" in out.getvalue()
    assert "default partition: 0 records left" in out.getvalue()

    assert _where(alice) == {1: "audit_hostevent_p20370308", 2: "audit_hostevent_p20370320",
                             3: "audit_hostevent_p20370320", 4: "audit_hostevent_p20370321",
                             5: "audit_hostevent_p20370323"}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM audit_hostevent_default")
        assert cursor.fetchone()[0] == 0
    assert _all_rows() == rows  # every record, every column, as it was
    assert _rollups() == rollups  # nothing counted twice
    assert chain_verify().intact
    # The new partitions are ordinary ones: append-only, and the next record goes into its own.
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_hostevent_p20370321")
    _record(alice, _day(2037, 3, 21, 20))
    assert _where(alice)[6] == "audit_hostevent_p20370321" and chain_verify().intact
    # The beat job back: the gaps around the repaired days are filled, 10 days ahead.
    assert records_partitions_ensure(_day(2037, 3, 19)) == [
        f"audit_hostevent_p203703{d}" for d in (19, 22, 24, 25, 26, 27, 28, 29)
    ]


def test_repair_exits_1_while_records_are_left(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects("acme")
    now = datetime.now(UTC)
    with connection.cursor() as cursor:  # the interval of now without a partition: the beat job down
        cursor.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'audit_hostevent'::regclass AND c.relname = %s",
            [f"audit_hostevent_p{now:%Y%m%d}"],
        )
        if cursor.fetchone() is not None:
            cursor.execute(f"ALTER TABLE audit_hostevent DETACH PARTITION audit_hostevent_p{now:%Y%m%d}")
            cursor.execute(f"DROP TABLE audit_hostevent_p{now:%Y%m%d}")
    _record(alice, now)
    with pytest.raises(CommandError) as refused:
        call_command("records_partitions", "repair", stdout=(out := StringIO()))
    assert refused.value.returncode == 1 and "1 records left" in str(refused.value)
    assert f"audit_hostevent_p{now:%Y%m%d}: still being written" in out.getvalue()
    call_command("records_partitions", "show", stdout=(shown := StringIO()))
    assert f"default partition: 1 records from {now:%Y-%m-%d}" in shown.getvalue()
