"""The chain across an upgrade: records written by the writers of earlier releases (their own SQL,
tests/audit/old_writers.py) join their streams' chains, whichever writer comes next, and
`audit_verify` is intact once the chainer has run; two connections appending to one stream at
once never fork it."""

from __future__ import annotations

import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.utils import timezone

from apps.audit.archive import export_range
from apps.audit.chain import GENESIS
from apps.audit.chainer import chain_pending
from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.models import ArchiveExport, HostEvent, HostEventStream
from apps.audit.services import host_event_append
from apps.audit.verify import chain_verify
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject
from tests.audit import old_writers

pytestmark = pytest.mark.django_db


def _stream(subject: Subject) -> list[HostEvent]:
    return list(
        HostEvent.unscoped_all_tenants.filter(tenant_id=subject.tenant_pk, subject_id=subject.subject_id).order_by(
            "sequence"
        )
    )


def _linked_as_documented(subject: Subject) -> None:
    """Every record of the stream links its predecessor by the README's digest, computed here
    from the stored rows with json and hashlib alone, and the stream's head is the last one."""
    prev = GENESIS
    records = _stream(subject)
    assert [e.sequence for e in records] == list(range(1, len(records) + 1))
    for event in records:
        content = old_writers.content_hash(
            tenant=subject.tenant, subject_id=event.subject_id, subject=event.subject, event_id=event.event_id,
            type=event.type, durable=event.durable, at=event.at, payload=event.payload,
        )  # fmt: skip
        assert (event.prev_digest, event.digest) == (prev, old_writers.link(prev, event.sequence, content))
        prev = event.digest
    head = HostEventStream.unscoped_all_tenants.get(tenant_id=subject.tenant_pk, subject_id=subject.subject_id)
    assert (head.last_sequence, head.last_digest) == (len(records), prev)


def _append(subject: Subject, n: int) -> None:
    host_event_append(subject=subject, type=NEGOTIATION_DECIDED, payload={"n": n}, durable=True)


def _verify(*args: str) -> tuple[int, str]:
    out, err = _Buffer(), _Buffer()
    try:
        call_command("audit_verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.text + err.text + str(exc)
    return 0, out.text + err.text


class _Buffer:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_the_previous_releases_records_and_this_ones_make_one_chain(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    old_writers.previous_release_append(alice, [{"n": 1}])  # an old pod, before the new one starts
    _append(alice, 2)
    old_writers.previous_release_append(alice, [{"n": 3}, {"n": 4}, {"n": 5}])  # a batch of three
    _append(alice, 6)
    _append(alice, 7)
    old_writers.previous_release_append(alice, [{"n": 8}])

    _linked_as_documented(alice)
    report = chain_verify()
    assert report.intact and report.records == 8 and not report.pending
    stream = HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id)
    assert stream.chained_through == 8  # the stream table's trigger: the old writer chained its own
    assert chain_pending().linked == 0  # nothing for the chainer


def test_records_of_a_release_before_the_chain_are_linked_by_the_chainer(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    _append(alice, 1)  # the new release serves first
    old_writers.prechain_orm_append(alice, {"n": 2})  # then an old pod, during the rollout
    old_writers.prechain_group_append(alice, [{"n": 3}, {"n": 4}])
    _append(alice, 5)  # the new writer, while the stream waits for the chainer
    old_writers.prechain_group_append(bob, [{"n": 1}])  # a stream an old pod opened
    _append(bob, 2)

    pending = {(p.subject_id, p.first, p.count) for p in chain_verify().pending}
    assert pending == {(alice.subject_id, 2, 4), (bob.subject_id, 1, 2)}
    assert [e.digest for e in _stream(alice)][1:] == ["", "", "", ""]  # not linked out of order
    status, out = _verify()
    assert status == 0 and "4 records from sequence 2 not yet chained" in out  # counted, not proved

    status, out = _call("audit_chain")
    assert status == 0 and "chained: 6 records linked in 2 streams" in out
    _append(alice, 6)  # caught up: the new writer links again itself
    assert _stream(alice)[-1].digest != ""
    _linked_as_documented(alice)
    _linked_as_documented(bob)
    report = chain_verify()
    assert report.intact and not report.pending and report.records == 8


def test_a_database_whose_records_predate_the_chain_is_chained_after_migrate(make_subject) -> None:  # type: ignore[no-untyped-def]
    # What a database that had not run audit 0008 holds once this release's migrate has run (the
    # backfill is no longer inside it): records without digests, counters with the column defaults.
    _, alice = make_subject("acme")
    for n in range(1, 6):
        old_writers.prechain_orm_append(alice, {"n": n})
    HostEventStream.unscoped_all_tenants.filter(subject_id=alice.subject_id).update(chained_through=None)
    assert HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id).last_digest == GENESIS

    assert [(p.first, p.count) for p in chain_verify().pending] == [(1, 5)]
    _append(alice, 6)  # the new release serves before the chainer has run
    assert chain_pending().linked == 6
    _linked_as_documented(alice)
    assert chain_verify().intact


def test_the_chainer_stops_at_a_gap_and_verify_names_it(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 1)
    for n in (2, 3, 4):
        old_writers.prechain_orm_append(alice, {"n": n})
    with connection.cursor() as cursor:  # someone with the database removes one behind the trigger's back
        cursor.execute("ALTER TABLE audit_hostevent DISABLE TRIGGER audit_hostevent_append_only")
        cursor.execute("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence = 3", [alice.subject_id])
        cursor.execute("ALTER TABLE audit_hostevent ENABLE TRIGGER audit_hostevent_append_only")

    [stream] = chain_pending().streams
    assert (stream.linked, stream.head, stream.stopped) == (1, 2, "gap at sequence 3")
    status, out = _call("audit_chain")
    assert status == 1 and "behind (gap at sequence 3)" in out
    status, out = _verify()
    assert status == 1 and f"acme {alice.subject_id}: sequence 3 missing" in out


def _call(command: str, *args: str) -> tuple[int, str]:
    out = _Buffer()
    try:
        call_command(command, *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, out.text + str(exc)
    return 0, out.text


@pytest.mark.django_db(transaction=True)
def test_two_connections_appending_to_one_stream_at_once_never_fork_it(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 0)
    holding, failures = threading.Event(), []

    def first() -> None:
        # Holds the stream's lock in an open transaction until the second connection waits on it.
        try:
            with transaction.atomic():
                _append(alice, 1)
                holding.set()
                _wait_until_blocked(alice)
                old_writers.previous_release_append(alice, [{"n": 2}])
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            holding.wait(30)
            with transaction.atomic():
                _append(alice, 3)  # waits for the first transaction's lock, then links after it
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures and not any(t.is_alive() for t in threads)
    assert [e.payload["n"] for e in _stream(alice)] == [0, 1, 2, 3]

    # And many at once, four connections per stream: this release's writer beside the previous
    # release's on one stream (an upgrade from 0.19.0), beside a pre-chain release's on another (from
    # a release before the chain). One release at a time is what an upgrade runs beside this one.
    _, bob = make_subject("acme")

    def many(kind: int) -> None:
        try:
            for i in range(15):
                if kind in (0, 2):
                    _append(alice if kind == 0 else bob, 100 + i)
                elif kind == 1:
                    old_writers.previous_release_append(alice, [{"n": 200 + i}, {"n": 300 + i}])
                elif kind == 3:
                    old_writers.prechain_group_append(bob, [{"n": 400 + i}, {"n": 450 + i}])
                else:
                    with transaction.atomic():
                        old_writers.prechain_orm_append(bob, {"n": 500 + i})
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    crowd = [threading.Thread(target=many, args=(kind,)) for kind in (0, 0, 1, 1, 2, 3, 4, 4)]
    for thread in crowd:
        thread.start()
    for thread in crowd:
        thread.join(120)
    assert not failures and not any(t.is_alive() for t in crowd)
    chain_pending()
    _linked_as_documented(alice)  # one line each: sequences 1..N, each linked to the one before
    _linked_as_documented(bob)
    assert (len(_stream(alice)), len(_stream(bob))) == (4 + 15 * 6, 15 * 5)
    assert chain_verify().intact
    connection.close()


def _wait_until_blocked(subject: Subject) -> None:
    """Until another backend waits on a lock (the second connection, on the stream's row)."""
    with connections["default"].cursor() as cursor:
        for _ in range(3000):
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else a transaction sees one snapshot of it
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
            threading.Event().wait(0.01)
    raise AssertionError("the second connection never waited on the stream's lock")


def test_an_export_chains_first_and_never_archives_a_record_without_its_link(make_subject, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    for n in (1, 2):
        old_writers.prechain_orm_append(alice, {"n": n})
        old_writers.prechain_orm_append(bob, {"n": n})
    acme = Tenant.objects.get(slug="acme")
    archive = tmp_path.as_uri()

    export = export_range(tenant=acme, since=None, until=timezone.now(), to_url=archive)  # chains both first

    assert {s["subjectId"]: s["head"] for s in export.streams} == {
        alice.subject_id: _stream(alice)[-1].digest, bob.subject_id: _stream(bob)[-1].digest,
    }  # fmt: skip
    assert "" not in {e.digest for e in _stream(alice) + _stream(bob)}
    old_writers.prechain_orm_append(bob, {"n": 3})
    with connection.cursor() as cursor:  # a record the chainer cannot link: its predecessor is gone
        cursor.execute("ALTER TABLE audit_hostevent DISABLE TRIGGER audit_hostevent_append_only")
        cursor.execute("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence = 2", [bob.subject_id])
        cursor.execute("ALTER TABLE audit_hostevent ENABLE TRIGGER audit_hostevent_append_only")
    HostEventStream.unscoped_all_tenants.filter(subject_id=bob.subject_id).update(chained_through=1)
    with pytest.raises(ValidationFailed, match="not chained yet"):
        export_range(tenant=acme, since=export.until, until=timezone.now(), to_url=archive)
    assert ArchiveExport.unscoped_all_tenants.count() == 1
