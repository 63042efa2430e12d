"""Exports to an s3:// archive, and verify against it, on a real S3-compatible server on loopback
(moto's, started here) reached through the usual variables: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from moto.server import ThreadedMotoServer

from apps.audit.archive import ArchiveUnavailable, export_range
from apps.audit.chain import content_hash, link
from apps.audit.host_event_types import HOST_TEST_TYPES, Delivery
from apps.audit.models import ArchiveExport, HostEvent, HostEventStream
from apps.audit.services import host_event_append
from apps.audit.verify import chain_verify
from apps.tenants.models import Tenant
from tests.audit.records import tamper

DURABLE = HOST_TEST_TYPES[Delivery.DURABLE]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the loopback server, with the environment pointing the host at it."""
    for name, value in {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "archive-test",
        "AWS_SECRET_ACCESS_KEY": "archive-test-secret",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    name = f"records-{uuid.uuid4().hex[:12]}"
    _client().create_bucket(Bucket=name)
    return name


def _client() -> Any:
    return boto3.client("s3")  # the endpoint, keys and region from the environment, as the host reads them


def _object(bucket: str, url: str) -> tuple[bytes, str]:
    key = url.removeprefix(f"s3://{bucket}/")
    response = _client().get_object(Bucket=bucket, Key=key)
    return response["Body"].read(), response["ContentType"]


@pytest.mark.django_db
def test_an_export_lands_in_the_bucket_with_a_matching_checksum(make_subject, bucket: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    for i in range(3):
        host_event_append(subject=alice, type=DURABLE, payload={"i": i}, durable=True)
    acme = Tenant.objects.get(slug="acme")

    export = export_range(tenant=acme, since=None, until=timezone.now(), to_url=f"s3://{bucket}/host-a/records")

    assert export.file_url.startswith(f"s3://{bucket}/host-a/records/tenant=acme/records-start-")
    assert export.manifest_url == export.file_url.removesuffix(".jsonl.gz") + ".manifest.json"
    data, data_type = _object(bucket, export.file_url)
    manifest_bytes, manifest_type = _object(bucket, export.manifest_url)
    manifest = json.loads(manifest_bytes)
    assert (data_type, manifest_type) == ("application/gzip", "application/json")
    assert hashlib.sha256(data).hexdigest() == export.sha256 == manifest["sha256"]
    assert len(data) == manifest["bytes"] == export.size
    last = HostEvent.objects.for_tenant(acme).order_by("sequence").last()
    assert last is not None
    assert manifest["count"] == export.count == 3
    assert manifest["streams"] == [
        {"subjectId": alice.subject_id, "count": 3, "firstSequence": 1, "lastSequence": 3, "head": last.digest}
    ]


@pytest.mark.django_db
def test_the_auditors_page_serves_an_s3_export_unchanged(make_subject, bucket: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    export = export_range(
        tenant=Tenant.objects.get(slug="acme"), since=None, until=timezone.now(), to_url=f"s3://{bucket}"
    )
    auditor = Client()
    user = User.objects.create_user("aud-s3", password="x", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    auditor.force_login(user)

    response = auditor.get(f"/host/openwop-host/audit/exports/{export.pk}/records.jsonl.gz")

    assert response.status_code == 200
    assert hashlib.sha256(b"".join(response.streaming_content)).hexdigest() == export.sha256  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_a_failed_upload_records_no_export(make_subject, bucket: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    with pytest.raises(ArchiveUnavailable, match="missing"):  # no such bucket: the server refuses the upload
        export_range(
            tenant=Tenant.objects.get(slug="acme"), since=None, until=timezone.now(), to_url=f"s3://{bucket}-missing"
        )
    assert not ArchiveExport.unscoped_all_tenants.exists()


@pytest.mark.django_db
def test_verify_checks_the_heads_against_the_buckets_own_manifests(make_subject, bucket: str) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    for i in range(3):
        host_event_append(subject=alice, type=DURABLE, payload={"i": i}, durable=True)
    url = f"s3://{bucket}/host-a/records"
    export = export_range(tenant=Tenant.objects.get(slug="acme"), since=None, until=timezone.now(), to_url=url)
    report = chain_verify(against=url)
    assert report.intact and report.outside == [f"acme {alice.subject_id}"] and report.inside == []

    # The last record rewritten with a self-consistent digest, the stream's head and the database's
    # export row moved with it: only the bucket's manifest still says what was exported.
    third = HostEvent.unscoped_all_tenants.get(subject_id=alice.subject_id, sequence=3)
    forged = link(third.prev_digest, 3, content_hash(
        tenant="acme", subject_id=alice.subject_id, subject=third.subject, event_id=third.event_id, type=third.type,
        durable=True, at=third.at, payload={"i": 9},
    ))  # fmt: skip
    tamper("UPDATE audit_hostevent SET payload = '{\"i\": 9}', digest = %s WHERE id = %s", [forged, third.pk])
    HostEventStream.unscoped_all_tenants.filter(subject_id=alice.subject_id).update(last_digest=forged)
    tamper("UPDATE audit_archiveexport SET streams = %s::jsonb WHERE id = %s",
           [json.dumps([{**export.streams[0], "head": forged}]), export.pk], table="audit_archiveexport")  # fmt: skip

    assert chain_verify().intact
    assert [(b.sequence, b.problem) for b in chain_verify(against=url).breaks] == [(3, "altered")]
    with pytest.raises(ArchiveUnavailable):
        chain_verify(against=f"s3://{bucket}-missing")
