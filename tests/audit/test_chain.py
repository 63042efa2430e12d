"""The records' hash chain (issue 36 item 4): both writers link every record to its predecessor,
and `audit_verify` names the first sequence altered or removed behind the append-only trigger's back."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from apps.audit.chain import GENESIS
from apps.audit.group_commit import host_event_append_batched, host_event_batcher
from apps.audit.host_event_types import HOST_TEST_TYPES, NEGOTIATION_DECIDED, Delivery
from apps.audit.models import ArchiveExport, HostEvent, HostEventStream
from apps.audit.services import host_event_append
from apps.audit.verify import chain_verify
from apps.core.async_db import async_pool_close
from apps.tenants.subject import Subject

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DURABLE = HOST_TEST_TYPES[Delivery.DURABLE]
EPHEMERAL = HOST_TEST_TYPES[Delivery.EPHEMERAL]


def _expected_digest(event: HostEvent, prev: str) -> str:
    """The digest as the README defines it, computed here from the stored row with nothing but
    json and hashlib: what an auditor holding an export would do."""
    content = {
        "tenant": event.tenant.slug,
        "subjectId": event.subject_id,
        "subject": event.subject,
        "eventId": event.event_id,
        "type": event.type,
        "durable": event.durable,
        "at": (event.at - EPOCH) // timedelta(microseconds=1),
        "payload": event.payload,
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    content_sha = hashlib.sha256(text.encode()).hexdigest()
    return hashlib.sha256(f"{prev}:{event.sequence}:{content_sha}".encode()).hexdigest()


def _stream(subject: Subject) -> list[HostEvent]:
    rows = HostEvent.unscoped_all_tenants.select_related("tenant")
    return list(rows.filter(tenant__slug=subject.tenant, subject_id=subject.subject_id).order_by("sequence"))


def _tamper(sql: str, params: list[Any]) -> None:
    """Change the table behind the append-only trigger's back (as someone with the database would)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred FK check may be pending at ALTER
        cursor.execute("ALTER TABLE audit_hostevent DISABLE TRIGGER audit_hostevent_append_only")
        cursor.execute(sql, params)
        cursor.execute("ALTER TABLE audit_hostevent ENABLE TRIGGER audit_hostevent_append_only")


def _verify(*args: str) -> tuple[int, str]:
    """Run `audit_verify`; its exit status and what it printed."""
    out, err = _Buffer(), _Buffer()
    try:
        call_command("audit_verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, err.text + str(exc)
    return 0, out.text


class _Buffer:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


@pytest.mark.django_db
def test_each_record_links_its_predecessor_by_the_documented_digest(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    payloads: list[dict[str, Any]] = [{"n": 1}, {"ünï": "cödé", "f": 2.5, "big": 1e16, "l": [1.0, None]}, {}]
    for payload in payloads:
        host_event_append(subject=alice, type=DURABLE, payload=payload, durable=True)
    host_event_append(subject=bob, type=EPHEMERAL, payload={}, durable=False)
    host_event_append(subject=alice, type=EPHEMERAL, payload={"z": True}, durable=False)

    stream = _stream(alice)
    prev = GENESIS
    for event in stream:
        assert event.prev_digest == prev
        if event.payload.get("big") is None:  # integral floats are written as integers (chain.py)
            assert event.digest == _expected_digest(event, prev)
        prev = event.digest
    assert [e.sequence for e in stream] == [1, 2, 3, 4]
    assert HostEventStream.unscoped_all_tenants.get(subject_id=alice.subject_id).last_digest == stream[-1].digest
    assert _stream(bob)[0].prev_digest == GENESIS
    assert len({e.digest for e in stream}) == len(stream)
    assert chain_verify().intact
    status, out = _verify()
    assert status == 0 and "intact: 5 records in 2 streams" in out


@pytest.mark.django_db
def test_the_returned_event_carries_its_link(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    first = host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    second = host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    stored = HostEvent.unscoped_all_tenants.get(pk=second.pk)
    assert (second.sequence, second.prev_digest, second.digest) == (2, first.digest, stored.digest)
    assert not second._state.adding and second.tenant.slug == "acme"


@pytest.mark.django_db
def test_verify_names_an_altered_record(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    for n in range(5):
        host_event_append(subject=alice, type=DURABLE, payload={"n": n}, durable=True)
    _tamper(
        "UPDATE audit_hostevent SET payload = '{\"n\": 99}' WHERE subject_id = %s AND sequence = 3",
        [alice.subject_id],
    )
    status, out = _verify()
    assert status == 1
    assert f"acme {alice.subject_id}: sequence 3 altered" in out


@pytest.mark.django_db
def test_verify_names_a_rewritten_record_whose_digest_was_recomputed(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    for n in range(4):
        host_event_append(subject=alice, type=DURABLE, payload={"n": n}, durable=True)
    second = _stream(alice)[1]
    second.payload = {"n": 42}
    forged = _expected_digest(second, second.prev_digest)  # self-consistent: only its successor disagrees
    _tamper("UPDATE audit_hostevent SET payload = '{\"n\": 42}', digest = %s WHERE id = %s", [forged, second.pk])
    report = chain_verify()
    assert [(b.sequence, b.problem) for b in report.breaks] == [(2, "altered")]


@pytest.mark.django_db
def test_verify_names_a_removed_record_in_the_middle_and_at_the_end(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    for n in range(5):
        host_event_append(subject=alice, type=DURABLE, payload={"n": n}, durable=True)
        host_event_append(subject=bob, type=DURABLE, payload={"n": n}, durable=True)
    _tamper("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence = 2", [alice.subject_id])
    _tamper("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence = 5", [bob.subject_id])
    status, out = _verify()
    assert status == 1
    assert f"acme {alice.subject_id}: sequence 2 missing" in out
    assert f"acme {bob.subject_id}: sequence 5 missing" in out
    assert "2 of 2 streams broken" in out


@pytest.mark.django_db
def test_verify_one_tenant_and_an_unknown_one(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, carol = make_subject("globex")
    for subject in (alice, carol, carol):
        host_event_append(subject=subject, type=DURABLE, payload={}, durable=True)
    _tamper("DELETE FROM audit_hostevent WHERE subject_id = %s AND sequence = 1", [carol.subject_id])
    assert _verify("--tenant", "acme")[0] == 0
    status, out = _verify("--tenant", "globex")
    assert status == 1 and f"globex {carol.subject_id}: sequence 1 missing" in out
    assert _verify("--tenant", "nobody")[0] == 2


@pytest.mark.django_db(transaction=True)
def test_group_commit_and_the_orm_path_extend_one_chain(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, carol = make_subject("globex")
    host_event_append(subject=alice, type=DURABLE, payload={"orm": 1}, durable=True)

    async def scenario() -> None:
        try:
            await asyncio.gather(
                *(
                    host_event_append_batched(subject=(alice, carol)[i % 2], type=NEGOTIATION_DECIDED, payload={"i": i})
                    for i in range(40)
                )
            )
            await host_event_batcher().drain()
        finally:
            await async_pool_close()

    asyncio.run(scenario())
    host_event_append(subject=alice, type=DURABLE, payload={"orm": 2}, durable=True)
    stream = _stream(alice)
    assert [e.sequence for e in stream] == list(range(1, 23))
    prev = GENESIS
    for event in stream:
        assert event.digest == _expected_digest(event, prev)
        prev = event.digest
    report = chain_verify()
    assert report.intact and report.records == 42 and report.streams == 2
    connection.close()


@pytest.mark.django_db
def test_an_exports_head_catches_a_chain_rewritten_to_its_end(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    for n in range(3):
        host_event_append(subject=alice, type=DURABLE, payload={"n": n}, durable=True)
    stream = _stream(alice)
    ArchiveExport.unscoped_all_tenants.create(
        tenant=stream[0].tenant, since=None, until=timezone.now(), file_url="file:///x", manifest_url="file:///y",
        count=3, size=1, sha256="0" * 64, exported_at=timezone.now(),
        streams=[{"subjectId": alice.subject_id, "count": 3, "firstSequence": 1, "lastSequence": 3,
                  "head": stream[2].digest}],
    )  # fmt: skip
    # Someone with the database rewrites record 2 and re-links everything after it, head included.
    stream[1].payload = {"n": 99}
    prev = _expected_digest(stream[1], stream[0].digest)
    third = _expected_digest(stream[2], prev)
    _tamper("UPDATE audit_hostevent SET payload = '{\"n\": 99}', digest = %s WHERE id = %s", [prev, stream[1].pk])
    _tamper("UPDATE audit_hostevent SET prev_digest = %s, digest = %s WHERE id = %s", [prev, third, stream[2].pk])
    HostEventStream.unscoped_all_tenants.filter(subject_id=alice.subject_id).update(last_digest=third)
    report = chain_verify()
    assert [(b.sequence, b.problem) for b in report.breaks] == [(3, "altered")]  # the first the export pins
