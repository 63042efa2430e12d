"""`audit_verify` trusts nothing it checks: a record at or below a stream's expiry anchor is itself a
finding; with an archive, the anchors and chain heads are checked against the manifests read from
the archive (not the database's own rows), and the report says which streams were checked outside
the database and which only inside. Re-anchoring a broken stream is an explicit, audited act that
verify reports ever after."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from apps.audit.archive import export_range
from apps.audit.chain import content_hash, link
from apps.audit.host_event_types import CHAIN_REANCHORED, NEGOTIATION_DECIDED
from apps.audit.models import HostEvent, HostEventStream
from apps.audit.partitions import records_expire, records_partitions_ensure
from apps.audit.services import host_event_append
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject
from tests.audit.records import record_at, tamper

YEAR = 2019  # instants in the past (an export's range may not end in the future), no other test's days


def _day(day: int, hour: int = 12) -> datetime:
    return datetime(YEAR, 2, day, hour, tzinfo=UTC)


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


def _stream(subject: Subject) -> list[HostEvent]:
    rows = HostEvent.unscoped_all_tenants.filter(tenant_id=subject.tenant_pk, subject_id=subject.subject_id)
    return list(rows.order_by("sequence"))


def _nine_records_two_days_expired(subject: Subject, *, archive: str = "", exported_until: int = 3) -> None:
    """Three records a day on Feb 1-3; with `archive`, exported up to the midnight opening day
    `exported_until`; then Feb 1 and 2 expire: the stream's anchor is sequence 6."""
    records_partitions_ensure(_day(1))
    for day in (1, 2, 3):
        for _ in range(3):
            record_at(subject, _day(day))
    if archive:
        tenant = Tenant.objects.get(slug=subject.tenant)
        export_range(tenant=tenant, since=None, until=_day(exported_until, 0), to_url=archive)
    expiry = records_expire(_day(28), keep=lambda tenant_pk: _day(3, 0))
    assert {f"audit_hostevent_p{YEAR}020{d}" for d in (1, 2)} <= set(expiry.dropped)
    stream = HostEventStream.unscoped_all_tenants.get(subject_id=subject.subject_id)
    assert (stream.expired_through, [e.sequence for e in _stream(subject)]) == (6, [7, 8, 9])


def _move_anchor(subject: Subject, to: int) -> None:
    digest = HostEvent.unscoped_all_tenants.get(subject_id=subject.subject_id, sequence=to).digest
    HostEventStream.unscoped_all_tenants.filter(subject_id=subject.subject_id).update(
        expired_through=to, expired_digest=digest
    )


@pytest.fixture
def archive(tmp_path: Path) -> str:
    folder = tmp_path / "archive"
    folder.mkdir()
    return folder.as_uri()


@pytest.fixture
def alice(make_subject) -> Subject:  # type: ignore[no-untyped-def]
    return make_subject("acme")[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("with_archive", [False, True])
def test_records_altered_below_a_moved_anchor_are_caught(alice: Subject, archive: str, with_archive: bool) -> None:
    _nine_records_two_days_expired(alice, archive=archive if with_archive else "")
    against = ("--against", archive) if with_archive else ()
    assert _verify(*against)[0] == 0
    # Someone with the database moves the anchor over two kept records and alters them: the records
    # below it were skipped, and verify said intact.
    _move_anchor(alice, 8)
    refused = json.dumps({"outcome": "refused"})
    tamper("UPDATE audit_hostevent SET payload = %s WHERE subject_id = %s AND sequence IN (7, 8)",
           [refused, alice.subject_id])  # fmt: skip

    status, out = _verify(*against)

    assert status == 1
    assert f"acme {alice.subject_id}: sequence 7 below the expiry anchor" in out
    if with_archive:  # the archive holds sequences 1-6: nothing of it is at the anchor now claimed
        assert f"acme {alice.subject_id}: sequence 8 expiry anchor not pinned by the archive" in out
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_an_anchor_moved_over_removed_records_is_caught_only_with_the_archive(alice: Subject, archive: str) -> None:
    _nine_records_two_days_expired(alice, archive=archive)
    _move_anchor(alice, 8)
    tamper("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence IN (7, 8)", [alice.subject_id])

    status, out = _verify("--against", archive)
    assert status == 1 and f"acme {alice.subject_id}: sequence 8 expiry anchor not pinned by the archive" in out

    # Inside the database alone the records left are consistent with the anchor: verify proves
    # them and says it could not check this stream outside.
    status, out = _verify()
    assert status == 0
    assert "only inside the database: all 1 streams (no archive configured or given)" in out
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_an_anchor_inside_an_archived_range_is_pinned_by_the_archived_record(alice: Subject, archive: str) -> None:
    # The export holds sequences 1-9; only 1-6 expire: the anchor is no manifest's last sequence,
    # so verify finds record 6 in the archived file itself.
    _nine_records_two_days_expired(alice, archive=archive, exported_until=4)
    status, out = _verify("--against", archive)
    assert status == 0 and f"checked against the archive {archive}: 1 streams" in out
    HostEventStream.unscoped_all_tenants.filter(subject_id=alice.subject_id).update(expired_digest="f" * 64)
    status, out = _verify("--against", archive)
    assert status == 1 and "sequence 6 expiry anchor not pinned by the archive" in out
    connection.close()


@pytest.mark.django_db
def test_the_archives_manifests_catch_what_the_databases_export_rows_no_longer_do(alice: Subject, archive: str) -> None:
    for n in range(3):
        host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"n": n}, durable=True)
    export = export_range(tenant=Tenant.objects.get(slug="acme"), since=None, until=timezone.now(), to_url=archive)
    # Someone rewrites record 3 with a self-consistent digest, moves the stream's head and the
    # database's own export row with it: nothing inside the database disagrees any more.
    third = _stream(alice)[2]
    content = content_hash(
        tenant="acme", subject_id=alice.subject_id, subject=third.subject, event_id=third.event_id, type=third.type,
        durable=True, at=third.at, payload={"n": 99},
    )  # fmt: skip
    forged = link(third.prev_digest, 3, content)
    tamper("UPDATE audit_hostevent SET payload = '{\"n\": 99}', digest = %s WHERE id = %s", [forged, third.pk])
    HostEventStream.unscoped_all_tenants.filter(subject_id=alice.subject_id).update(last_digest=forged)
    streams = [{**export.streams[0], "head": forged}]
    tamper("UPDATE audit_archiveexport SET streams = %s::jsonb WHERE id = %s", [json.dumps(streams), export.pk],
           table="audit_archiveexport")  # fmt: skip

    assert _verify()[0] == 0  # inside the database alone: fooled, and it says so
    status, out = _verify("--against", archive)
    assert status == 1 and f"acme {alice.subject_id}: sequence 3 altered" in out
    assert f"checked against the archive {archive}: 1 streams" in out


@pytest.mark.django_db
def test_the_configured_archive_is_checked_and_never_exported_streams_named(make_subject, archive, settings) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    export_range(tenant=Tenant.objects.get(slug="acme"), since=None, until=timezone.now(), to_url=archive)
    host_event_append(subject=bob, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    settings.OPENWOP_ARCHIVE_URL = archive

    status, out = _verify()

    assert status == 0 and f"checked against the archive {archive}: 1 streams" in out
    assert f"only inside the database (nothing of them archived): 1 streams: acme {bob.subject_id}" in out


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "status"), [("file:///no/such/archive", 3), ("http://archive.example", 2)])
def test_an_archive_that_cannot_be_read_concludes_nothing(alice: Subject, url: str, status: int) -> None:
    host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    code, out = _verify("--against", url)
    assert code == status and "intact" not in out


# --- Re-anchoring --------------------------------------------------------------------------------


def _five_with_the_third_altered(subject: Subject) -> None:
    for n in range(5):
        host_event_append(subject=subject, type=NEGOTIATION_DECIDED, payload={"n": n}, durable=True)
    tamper("UPDATE audit_hostevent SET payload = '{\"n\": 42}' WHERE subject_id = %s AND sequence = 3",
           [subject.subject_id])  # fmt: skip


@pytest.mark.django_db
def test_a_reanchor_is_a_record_in_the_stream_and_verify_reports_it_ever_after(alice: Subject) -> None:
    _five_with_the_third_altered(alice)
    assert _verify("--tenant", "acme")[0] == 1

    status, out = _verify("--reanchor", "--tenant", "acme", "--reason", "restored from the 12-01 backup")

    assert status == 0, out
    actor = f"cli:{getpass.getuser()}"
    record = _stream(alice)[-1]
    assert (record.sequence, record.type, record.durable) == (6, CHAIN_REANCHORED, True)
    assert record.payload == {
        "reason": "restored from the 12-01 backup", "actor": actor, "brokenAt": 3, "problem": "altered",
        "previousHead": _stream(alice)[4].digest,
    }  # fmt: skip
    line = (
        f"acme {alice.subject_id}: re-anchored at sequence 6 on {record.at.date().isoformat()} by {actor}:"
        " restored from the 12-01 backup (accepting: sequence 3 altered)"
    )
    assert line in out and "intact: 6 records in 1 streams" in out
    host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"n": 6}, durable=True)
    status, out = _verify()
    assert status == 0 and line in out  # ever after


@pytest.mark.django_db
@pytest.mark.parametrize("sequence", [2, 7])
def test_a_reanchor_accepts_only_the_breaks_it_names(alice: Subject, sequence: int) -> None:
    _five_with_the_third_altered(alice)
    _verify("--reanchor", "--tenant", "acme", "--reason", "known incident")
    host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"n": 6}, durable=True)
    # A record before the accepted break, or after the re-anchor, altered later: caught again.
    tamper("UPDATE audit_hostevent SET payload = '{\"n\": 0}' WHERE subject_id = %s AND sequence = %s",
           [alice.subject_id, sequence])  # fmt: skip
    status, out = _verify()
    assert status == 1 and f"acme {alice.subject_id}: sequence {sequence} altered" in out


@pytest.mark.django_db
def test_a_reanchor_needs_a_reason_a_tenant_and_a_break(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, carol = make_subject("globex")
    _five_with_the_third_altered(alice)
    host_event_append(subject=carol, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    before = HostEvent.unscoped_all_tenants.count()

    assert _verify("--reanchor", "--tenant", "acme")[0] == 2
    assert _verify("--reanchor", "--tenant", "acme", "--reason", "  ")[0] == 2
    assert _verify("--reanchor", "--reason", "why")[0] == 2
    status, out = _verify("--reanchor", "--tenant", "globex", "--reason", "why")  # another tenant's break
    assert status == 2 and "nothing to re-anchor: every stream of globex verifies" in out
    assert _verify("--reanchor", "--tenant", "acme", "--subject", carol.subject_id, "--reason", "why")[0] == 2
    assert HostEvent.unscoped_all_tenants.count() == before  # nothing was written
    assert _verify("--tenant", "acme")[0] == 1


@pytest.mark.django_db
def test_a_reanchor_reason_is_printed_escaped(alice: Subject) -> None:
    _five_with_the_third_altered(alice)
    status, out = _verify("--reanchor", "--tenant", "acme", "--reason", "ok\x1b[2J\nintact: forged")
    assert status == 0
    assert "ok\\x1b[2J\\nintact: forged" in out and "\x1b" not in out
