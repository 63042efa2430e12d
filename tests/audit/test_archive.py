"""Export before expiry (issue 36 item 3, apps/audit/archive.py) to a file:// archive: the file's
checksum and count match the manifest and the table, every line carries its record's chain link,
the range bounds hold, the same range makes the same bytes, `exported_through` follows only
contiguous coverage from the first record, refusals write nothing, and the auditors' page links
and serves each export unchanged."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.utils import timezone

from apps.audit import archive
from apps.audit.archive import export_range, exported_through
from apps.audit.chain import canonical_content, link
from apps.audit.host_event_types import HOST_TEST_TYPES, Delivery
from apps.audit.models import GENESIS, ArchiveExport, HostEvent
from apps.audit.services import host_event_append
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

DURABLE = HOST_TEST_TYPES[Delivery.DURABLE]
AUDIT = "/host/openwop-host/audit/negotiations"
CHAIN_KEYS = ("sequence", "prevDigest", "digest")


def _append(subject: Subject, n: int, **payload: Any) -> None:
    for i in range(n):
        host_event_append(subject=subject, type=DURABLE, payload={"i": i, **payload}, durable=True)


def _tenant(subject: Subject) -> Tenant:
    return Tenant.objects.get(slug=subject.tenant)


def _path(url: str) -> Path:
    return Path(unquote(urlsplit(url).path))


def _lines(export: ArchiveExport) -> list[dict[str, Any]]:
    with gzip.open(_path(export.file_url), "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def _manifest(export: ArchiveExport) -> dict[str, Any]:
    return json.loads(_path(export.manifest_url).read_bytes())


@pytest.fixture
def archive_url(tmp_path: Path) -> str:
    return (tmp_path / "archive").as_uri()


@pytest.mark.django_db
def test_an_exports_checksum_count_and_chain_match_its_records(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    _, mallory = make_subject("globex")
    _append(alice, 3, note='é 漢 "quoted"', ratio=1.5)
    _append(bob, 2)
    _append(mallory, 4)
    until = timezone.now()
    acme = _tenant(alice)

    export = export_range(tenant=acme, since=None, until=until, to_url=archive_url)

    data = _path(export.file_url).read_bytes()
    manifest = _manifest(export)
    assert hashlib.sha256(data).hexdigest() == export.sha256 == manifest["sha256"]
    assert len(data) == export.size == manifest["bytes"]
    assert _path(export.file_url).name == manifest["file"]
    assert _path(export.manifest_url).parent == _path(export.file_url).parent == _path(archive_url) / "tenant=acme"
    assert manifest["tenant"] == "acme" and manifest["since"] is None
    assert manifest["until"] == until.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    lines = _lines(export)
    rows = list(HostEvent.objects.for_tenant(acme).order_by("subject_id", "sequence"))
    assert len(lines) == export.count == manifest["count"] == len(rows) == 5
    for line, row in zip(lines, rows, strict=True):
        content = {key: value for key, value in line.items() if key not in CHAIN_KEYS}
        # The line minus its chain keys is byte for byte the content the digest covers ...
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert canonical == canonical_content(
            tenant="acme",
            subject_id=row.subject_id,
            subject=row.subject,
            event_id=row.event_id,
            type=row.type,
            durable=row.durable,
            at=row.at,
            payload=row.payload,
        )
        # ... so the chain can be walked from the file alone.
        assert line["digest"] == link(line["prevDigest"], line["sequence"], hashlib.sha256(canonical).hexdigest())
        assert (line["sequence"], line["prevDigest"], line["digest"]) == (row.sequence, row.prev_digest, row.digest)
    alices = [line for line in lines if line["subjectId"] == alice.subject_id]
    assert alices[0]["prevDigest"] == GENESIS and alices[0]["payload"]["note"] == 'é 漢 "quoted"'
    assert alices[0]["payload"]["ratio"] == 1.5

    heads = {  # in the table's (subject, sequence) order, the last row of a stream wins
        row.subject_id: {
            "subjectId": row.subject_id,
            "count": row.sequence,
            "firstSequence": 1,
            "lastSequence": row.sequence,
            "head": row.digest,
        }
        for row in rows
    }
    assert manifest["streams"] == export.streams == list(heads.values())
    assert {line["tenant"] for line in lines} == {"acme"}


@pytest.mark.django_db
def test_the_range_holds_the_records_at_or_after_since_and_before_until(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 3)
    middle = timezone.now()
    _append(alice, 2)
    end = timezone.now()
    acme = _tenant(alice)

    before = export_range(tenant=acme, since=None, until=middle, to_url=archive_url)
    after = export_range(tenant=acme, since=middle, until=end, to_url=archive_url)

    assert [line["sequence"] for line in _lines(before)] == [1, 2, 3]
    assert [line["sequence"] for line in _lines(after)] == [4, 5]
    assert _lines(after)[0]["prevDigest"] == _manifest(before)["streams"][0]["head"]
    head = _lines(after)[-1]["digest"]
    assert _manifest(after)["streams"] == [
        {"subjectId": alice.subject_id, "count": 2, "firstSequence": 4, "lastSequence": 5, "head": head}
    ]
    assert "start" in before.file_url and middle.strftime("%Y%m%dT%H%M%SZ") in after.file_url


@pytest.mark.django_db
def test_records_are_read_in_batches_across_streams(make_subject, archive_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    _append(alice, 3)
    _append(bob, 4)
    monkeypatch.setattr(archive, "BATCH", 2)  # batch edges inside and between streams

    export = export_range(tenant=_tenant(alice), since=None, until=timezone.now(), to_url=archive_url)

    pairs = [(line["subjectId"], line["sequence"]) for line in _lines(export)]
    in_order = HostEvent.objects.for_tenant(export.tenant_id).order_by("subject_id", "sequence")
    assert pairs == list(in_order.values_list("subject_id", "sequence"))
    assert len(pairs) == len(set(pairs)) == 7


@pytest.mark.django_db
def test_the_same_range_again_writes_the_same_bytes_under_the_same_names(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 2)
    until = timezone.now()
    first = export_range(tenant=_tenant(alice), since=None, until=until, to_url=archive_url)
    first_bytes = (_path(first.file_url).read_bytes(), _path(first.manifest_url).read_bytes())

    again = export_range(tenant=_tenant(alice), since=None, until=until, to_url=archive_url)

    assert (again.file_url, again.manifest_url, again.sha256) == (first.file_url, first.manifest_url, first.sha256)
    assert (_path(again.file_url).read_bytes(), _path(again.manifest_url).read_bytes()) == first_bytes
    assert sorted(p.name for p in _path(first.file_url).parent.iterdir()) == sorted(
        [_path(first.file_url).name, _path(first.manifest_url).name]
    )


@pytest.mark.django_db
def test_an_empty_range_is_an_export_of_no_records(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    until = timezone.now()
    export = export_range(tenant=_tenant(alice), since=until - timedelta(days=1), until=until, to_url=archive_url)
    assert export.count == 0 and _lines(export) == [] and _manifest(export)["streams"] == []
    assert hashlib.sha256(_path(export.file_url).read_bytes()).hexdigest() == export.sha256


@pytest.mark.django_db
def test_exported_through_follows_contiguous_exports_from_the_first_record(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("globex")
    _append(alice, 1)
    t1 = timezone.now()
    _append(alice, 1)
    t2 = timezone.now()
    t3 = t2 + timedelta(microseconds=10)
    t4 = t3 + timedelta(microseconds=10)
    acme = _tenant(alice)
    _wait_past(t4)

    assert exported_through(acme.pk) is None
    export_range(tenant=acme, since=t1, until=t2, to_url=archive_url)
    assert exported_through(acme.pk) is None  # nothing before t1 is exported yet
    export_range(tenant=acme, since=None, until=t1, to_url=archive_url)
    assert exported_through(acme.pk) == t2
    export_range(tenant=acme, since=t3, until=t4, to_url=archive_url)
    assert exported_through(acme.pk) == t2  # [t2, t3) is in no export
    export_range(tenant=acme, since=t1, until=t3, to_url=archive_url)
    assert exported_through(acme.pk) == t4
    assert exported_through(_tenant(bob).pk) is None  # another tenant's exports are not its own


def _wait_past(instant: datetime) -> None:
    while timezone.now() <= instant:
        pass


@pytest.mark.django_db
def test_the_configured_archive_is_the_default(make_subject, archive_url: str, settings) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 1)
    settings.OPENWOP_ARCHIVE_URL = archive_url
    export = export_range(tenant=_tenant(alice), since=None, until=timezone.now())
    assert export.file_url.startswith(archive_url + "/tenant%3Dacme/records-start-")
    assert export.count == 1


@pytest.mark.parametrize(
    ("since", "until", "url", "message"),
    [
        (None, timedelta(hours=1), "file:///tmp/x", "in the future"),
        (timedelta(0), timedelta(0), "file:///tmp/x", "before its 'until'"),
        (None, timedelta(0), "http://example.com/x", "file:///dir or s3://"),
        (None, timedelta(0), "file:relative/dir", "absolute directory"),
        (None, timedelta(0), "file://otherhost/dir", "absolute directory"),
        (None, timedelta(0), "s3://AKIA:secret@bucket/x", "no credentials"),
        (None, timedelta(0), "s3://Not_A_Bucket/x", "bucket name"),
        (None, timedelta(0), None, "No archive is configured"),
    ],
)
@pytest.mark.django_db
def test_a_refused_export_writes_nothing(make_subject, tmp_path: Path, since, until, url, message, settings) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 1)
    settings.OPENWOP_ARCHIVE_URL = ""
    now = timezone.now()
    with pytest.raises(ValidationFailed) as refused:
        export_range(
            tenant=_tenant(alice),
            since=None if since is None else now + since,
            until=now + until,
            to_url=url,
        )
    assert message in refused.value.message
    assert "secret" not in refused.value.message
    assert not ArchiveExport.unscoped_all_tenants.exists()


@pytest.mark.django_db
def test_a_range_without_an_offset_is_refused(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    with pytest.raises(ValidationFailed, match="UTC offset"):
        export_range(tenant=_tenant(alice), since=None, until=datetime(2020, 1, 1), to_url=archive_url)


@pytest.mark.django_db
def test_exports_are_append_only(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    export = export_range(tenant=_tenant(alice), since=None, until=timezone.now(), to_url=archive_url)
    for statement in ("UPDATE audit_archiveexport SET count = 7", "DELETE FROM audit_archiveexport"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    assert ArchiveExport.objects.for_tenant(export.tenant_id).get().count == 0


@pytest.mark.django_db
def test_the_command_exports_and_prints_the_manifest(make_subject, archive_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 2)
    until = timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%f")  # no offset: UTC

    call_command("audit_export", "--tenant", "acme", "--until", until, "--to", archive_url)

    out, err = capsys.readouterr()
    export = ArchiveExport.objects.for_tenant(_tenant(alice)).get()
    assert out.strip() == export.manifest_url
    assert f"2 records, {export.size} bytes, sha256 {export.sha256}" in err
    assert export.since is None and export.until.isoformat().startswith(until)


@pytest.mark.parametrize(
    "argv",
    [
        ["--tenant", "nobody", "--until", "2020-01-01T00:00:00Z"],
        ["--tenant", "acme", "--until", "yesterday"],
        ["--tenant", "acme", "--since", "2020-01-02", "--until", "2020-01-01"],
        ["--tenant", "acme", "--until", "2999-01-01T00:00:00Z"],
        ["--tenant", "acme", "--until", "2020-01-01T00:00:00Z", "--to", "ftp://example.com/"],
    ],
)
@pytest.mark.django_db
def test_the_command_refuses_with_status_2_and_writes_nothing(make_subject, archive_url: str, argv) -> None:  # type: ignore[no-untyped-def]
    make_subject("acme")
    with pytest.raises(CommandError) as refused:
        call_command("audit_export", *argv, *([] if "--to" in argv else ["--to", archive_url]))
    assert refused.value.returncode == 2
    assert not ArchiveExport.unscoped_all_tenants.exists()


@pytest.fixture
def auditor() -> Client:
    client = Client()
    user = User.objects.create_user("aud-archive", password="x", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_auditors_page_links_and_serves_each_export(make_subject, archive_url: str, auditor: Client) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, mallory = make_subject("globex")
    _append(alice, 2)
    _append(mallory, 1)
    until = timezone.now()
    acme = export_range(tenant=_tenant(alice), since=None, until=until, to_url=archive_url)
    globex = export_range(tenant=_tenant(mallory), since=None, until=until, to_url=archive_url)

    page = auditor.get(AUDIT).content.decode()
    records_link = f"/host/openwop-host/audit/exports/{acme.pk}/records.jsonl.gz"
    manifest_link = f"/host/openwop-host/audit/exports/{acme.pk}/manifest.json"
    assert records_link in page and manifest_link in page and acme.sha256 in page
    assert f"/exports/{globex.pk}/records.jsonl.gz" in page
    filtered = auditor.get(AUDIT, {"tenant": "acme"}).content.decode()
    assert records_link in filtered and f"/exports/{globex.pk}/" not in filtered

    records = auditor.get(records_link)
    assert records.status_code == 200 and records["Content-Type"] == "application/gzip"
    assert _path(acme.file_url).name in records["Content-Disposition"]
    assert hashlib.sha256(b"".join(records.streaming_content)).hexdigest() == acme.sha256  # type: ignore[attr-defined]
    manifest = auditor.get(manifest_link)
    assert manifest["Content-Type"] == "application/json"
    assert json.loads(b"".join(manifest.streaming_content)) == _manifest(acme)  # type: ignore[attr-defined]
    assert auditor.get("/host/openwop-host/audit/exports/999999/manifest.json").status_code == 404


@pytest.mark.django_db
def test_only_auditors_reach_the_exports(make_subject, archive_url: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    export = export_range(tenant=_tenant(alice), since=None, until=timezone.now(), to_url=archive_url)
    staff = Client()
    staff.force_login(User.objects.create_user("staff-only", password="x", is_staff=True))
    for client in (Client(), staff):
        response = client.get(f"/host/openwop-host/audit/exports/{export.pk}/records.jsonl.gz")
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_an_archive_that_cannot_be_written_fails_the_command_with_status_1(make_subject, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _append(alice, 1)
    (tmp_path / "a-file").write_text("not a directory")
    until = timezone.now().isoformat()
    with pytest.raises(CommandError, match="Could not write") as failed:
        call_command("audit_export", "--tenant", "acme", "--until", until, "--to", (tmp_path / "a-file").as_uri())
    assert failed.value.returncode == 1
    assert not ArchiveExport.unscoped_all_tenants.exists()


@pytest.mark.django_db
def test_an_export_gone_from_the_archive_is_not_found(make_subject, archive_url: str, auditor: Client) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    export = export_range(tenant=_tenant(alice), since=None, until=timezone.now(), to_url=archive_url)
    _path(export.file_url).unlink()
    assert auditor.get(f"/host/openwop-host/audit/exports/{export.pk}/records.jsonl.gz").status_code == 404
    assert auditor.get(f"/host/openwop-host/audit/exports/{export.pk}/manifest.json").status_code == 200
