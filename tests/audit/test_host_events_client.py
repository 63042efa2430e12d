"""The real `openwop-client` against a live uvicorn: its SSE helper parses our frames and resumes by
eventId, and its `host_emit_test_event` (RFC 0241) drives events into the caller's stream only."""

from __future__ import annotations

import pytest
from openwop_client import HostEventDoc, OpenwopClient, stream_host_events

from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.services import host_event_append
from tests.audit.sse_frames import Drain


def _until(docs: Drain[HostEventDoc], event_id: str) -> list[HostEventDoc]:
    return docs.until(lambda doc: doc.raw.get("eventId") == event_id)


def _ids(docs: list[HostEventDoc]) -> list[str]:
    return [str(d.raw["eventId"]) for d in docs]


def test_client_stream_helper_resumes_and_parses(live_url: str, make_subject) -> None:  # type: ignore[no-untyped-def]
    key, alice = make_subject()
    events = [
        host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"n": n}, durable=True) for n in range(3)
    ]
    docs = Drain(
        stream_host_events(live_url, key, last_event_id=events[0].event_id, reconnect=False, timeout_seconds=30)
    )
    try:
        replayed = _until(docs, events[2].event_id)  # the first read opens the connection
        live = host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"n": 3}, durable=True)
        after = _until(docs, live.event_id)
    finally:
        docs.close(lambda: host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True))
    assert _ids(replayed) == [events[1].event_id, events[2].event_id]
    assert _ids(after) == [live.event_id]
    doc = after[0]
    assert doc.type == NEGOTIATION_DECIDED
    assert doc.payload == {"n": 3}
    assert doc.timestamp == live.as_wire()["timestamp"]
    assert doc.raw["delivery"] == "durable"


@pytest.fixture
def alice_and_carol(seams_live_url: str, make_subject):  # type: ignore[no-untyped-def]
    alice_key, _ = make_subject("acme")
    carol_key, _ = make_subject("globex")
    return OpenwopClient(seams_live_url, alice_key), OpenwopClient(seams_live_url, carol_key)


def test_emitted_test_events_reach_their_tenant_only(alice_and_carol) -> None:  # type: ignore[no-untyped-def]
    alice, carol = alice_and_carol
    # Each stream resumes after an event of its own, so its first read proves it is subscribed.
    alice_start = [alice.host_emit_test_event("durable") for _ in range(2)]
    carol_start = [carol.host_emit_test_event("durable") for _ in range(2)]
    alice_docs = Drain(alice.host_events(last_event_id=alice_start[0].eventId, reconnect=False))
    carol_docs = Drain(carol.host_events(last_event_id=carol_start[0].eventId, reconnect=False))
    try:
        assert _ids(_until(alice_docs, alice_start[1].eventId)) == [alice_start[1].eventId]
        assert _ids(_until(carol_docs, carol_start[1].eventId)) == [carol_start[1].eventId]
        emitted = [alice.host_emit_test_event("ephemeral"), alice.host_emit_test_event("durable")]
        alice_seen = _until(alice_docs, emitted[1].eventId)
        carol_marks = [carol.host_emit_test_event("ephemeral"), carol.host_emit_test_event("durable")]
        carol_seen = _until(carol_docs, carol_marks[1].eventId)
    finally:
        alice_docs.close(lambda: alice.host_emit_test_event("durable"))
        carol_docs.close(lambda: carol.host_emit_test_event("durable"))
    assert [r.type for r in emitted] == ["host-test.ephemeral-triggered", "host-test.durable-triggered"]
    assert _ids(alice_seen) == [e.eventId for e in emitted]
    assert [(d.type, d.raw["delivery"], d.payload) for d in alice_seen] == [
        ("host-test.ephemeral-triggered", "ephemeral", {}),
        ("host-test.durable-triggered", "durable", {}),
    ]
    assert _ids(carol_seen) == [m.eventId for m in carol_marks]  # nothing of alice's
