"""`GET /host/events` against a live uvicorn: the caller's own events only, durable frames resumable
by eventId, ephemeral frames live-only, errors as the envelope (events.md §Host events, RFC 0236)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource

from apps.audit.host_event_types import HOST_TEST_TYPES, NEGOTIATION_DECIDED, Delivery
from apps.audit.services import host_event_append
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_revoke
from tests.audit.sse_frames import Frame, get_refused, ids_of, open_host_events
from tests.envelope import SPEC, assert_envelope

DURABLE = HOST_TEST_TYPES[Delivery.DURABLE]
EPHEMERAL = HOST_TEST_TYPES[Delivery.EPHEMERAL]
SCHEMAS = SPEC / "openwop-v2/schemas/v2"


@cache
def _host_event_validator() -> jsonschema.Draft202012Validator:
    documents = [json.loads(path.read_text()) for path in SCHEMAS.glob("*.schema.json")]
    registry: Registry[Any] = Registry().with_resources(
        (doc["$id"], Resource.from_contents(doc)) for doc in documents if "$id" in doc
    )
    schema = json.loads((SCHEMAS / "host-event.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _append(subject, type_name: str, payload: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    return host_event_append(subject=subject, type=type_name, payload=payload or {}, durable=type_name != EPHEMERAL)


@pytest.fixture
def http(live_url: str):  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=live_url, timeout=httpx.Timeout(30.0)) as client:
        yield client


def test_frames_are_host_event_envelopes(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    key, alice = make_subject()
    with open_host_events(http, key) as stream:
        decided = _append(alice, NEGOTIATION_DECIDED, {"protocol": "a2a", "outcome": "accepted"})
        ephemeral = _append(alice, EPHEMERAL)
        frames = stream.read_until(ephemeral.event_id)
    assert ids_of(frames) == [decided.event_id, ephemeral.event_id]
    durable_frame, ephemeral_frame = frames
    for frame in frames:
        _host_event_validator().validate(frame.data)  # closed: no runId, no sequence
        assert frame.event == frame.data["type"]  # `event:` is the type
        datetime.fromisoformat(frame.data["timestamp"])
    assert durable_frame.data["delivery"] == "durable"
    assert durable_frame.id == decided.event_id  # resumable by eventId
    assert durable_frame.data["payload"] == {"protocol": "a2a", "outcome": "accepted"}
    assert ephemeral_frame.data["delivery"] == "ephemeral"
    assert ephemeral_frame.id is None  # nothing to resume from
    assert ephemeral_frame.data["payload"] == {}


def test_a_subscriber_receives_only_its_own_events(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    """Same tenant, other Subject; and another tenant: neither sees the other's events (RFC 0236 §D)."""
    alice_key, alice = make_subject("acme")
    bob_key, bob = make_subject("acme")
    carol_key, carol = make_subject("globex")
    with (
        open_host_events(http, alice_key) as alice_stream,
        open_host_events(http, bob_key) as bob_stream,
        open_host_events(http, carol_key) as carol_stream,
    ):
        alice_events = [_append(alice, DURABLE), _append(alice, EPHEMERAL), _append(alice, NEGOTIATION_DECIDED)]
        alice_ids = {e.event_id for e in alice_events}
        received: dict[str, list[Frame]] = {}
        for name, subject, stream in (("bob", bob, bob_stream), ("carol", carol, carol_stream)):
            # Two markers of its own, written after alice's events: a leak would be in the same or
            # an earlier read than the first, so it arrives before the second.
            first = _append(subject, DURABLE)
            frames = stream.read_until(first.event_id)
            second = _append(subject, EPHEMERAL)
            frames += stream.read_until(second.event_id)
            received[name] = frames
            assert ids_of(frames) == [first.event_id, second.event_id], name
        alice_frames = alice_stream.read_until(alice_events[-1].event_id)
    assert ids_of(alice_frames) == [e.event_id for e in alice_events]
    leaked = {f.event_id for frames in received.values() for f in frames} & alice_ids
    assert leaked == set()


def test_last_event_id_replays_durable_events_only(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    key, alice = make_subject()
    with open_host_events(http, key) as stream:
        d1, x1, d2 = _append(alice, DURABLE), _append(alice, EPHEMERAL), _append(alice, DURABLE)
        first = stream.read_until(d2.event_id)
    assert ids_of(first) == [d1.event_id, x1.event_id, d2.event_id]
    # Disconnected: more of both classes are written.
    x2, d3 = _append(alice, EPHEMERAL), _append(alice, NEGOTIATION_DECIDED)
    with open_host_events(http, key, last_event_id=d1.event_id) as stream:
        d4 = _append(alice, DURABLE)
        x3 = _append(alice, EPHEMERAL)  # live: delivered once
        resumed = stream.read_until(x3.event_id)
    # After d1: the durable d2, d3 replayed, then live d4, x3; x1 and x2 are never sent again.
    assert ids_of(resumed) == [d2.event_id, d3.event_id, d4.event_id, x3.event_id]
    assert {x1.event_id, x2.event_id}.isdisjoint(ids_of(resumed))
    assert [f.id for f in resumed] == [d2.event_id, d3.event_id, d4.event_id, None]


def test_without_last_event_id_only_live_events_arrive(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    key, alice = make_subject()
    before = _append(alice, DURABLE)
    with open_host_events(http, key) as stream:
        live = _append(alice, DURABLE)
        frames = stream.read_until(live.event_id)
    assert ids_of(frames) == [live.event_id]
    assert before.event_id not in ids_of(frames)


def test_unknown_or_foreign_last_event_id_is_one_resync_answer(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    alice_key, alice = make_subject("acme")
    _, bob = make_subject("acme")
    _, carol = make_subject("globex")
    bobs = _append(bob, DURABLE)
    carols = _append(carol, DURABLE)
    alices_ephemeral = _append(alice, EPHEMERAL)
    answers = []
    for cursor in ("Zz" * 12, bobs.event_id, carols.event_id, alices_ephemeral.event_id):
        response = get_refused(http, {"Authorization": f"Bearer {alice_key}", "Last-Event-ID": cursor})
        assert response.status_code == 409
        assert response.json()["error"] == "host_event_resync_required"
        answers.append(response.content)
    assert len(set(answers)) == 1  # byte-identical: the cursor reveals nothing about other streams
    malformed = get_refused(http, {"Authorization": f"Bearer {alice_key}", "Last-Event-ID": "7"})
    assert_envelope(malformed, "validation_error", 400)


def test_authentication_is_required(http, make_subject) -> None:  # type: ignore[no-untyped-def]
    response = get_refused(http, {})
    assert_envelope(response, "unauthenticated", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.headers["OpenWOP-Version"]
    for bad in ("Bearer owk_000000000000.not-a-secret", "Basic dXNlcjpwYXNz", "Bearer"):
        assert_envelope(get_refused(http, {"Authorization": bad}), "unauthenticated", 401)
    key, alice = make_subject()
    api_key_revoke(api_key=ApiKey.objects.for_tenant(Tenant.objects.get(slug="acme")).get(subject_id=alice.subject_id))
    revoked = get_refused(http, {"Authorization": f"Bearer {key}"})
    assert_envelope(revoked, "credential_revoked", 401)


def test_only_get_is_served(client) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/host/events")
    assert_envelope(response, "validation_error", 405)
    assert response.headers["Allow"] == "GET"
