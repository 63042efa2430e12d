"""OpenWOP webhooks (webhooks.md): register, unregister, dead letters, signed delivery, discovery.
Every API case has its cross-tenant twin: another tenant's webhookId answers as an unknown one."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from referencing import Registry, Resource

from apps.push.engine import delivery_attempt
from apps.push.models import Delivery, DeliveryStatus, Webhook
from tests.core.https_receivers import Behaviour, Receiver
from tests.envelope import SPEC, assert_envelope
from tests.push.conftest import deliveries, drive, url_of
from tests.runs.conftest import Caller, advance
from tests.runs.wire_checks import assert_event_doc

pytestmark = pytest.mark.django_db
SCHEMAS = SPEC / "openwop-v2/schemas/v2"
SECRET = "whsec-test-0b5e7c2d-not-for-logs"


def _delete(caller: Caller, path: str) -> Any:
    return caller.client.delete(path, headers={"Authorization": f"Bearer {caller.key}"})


def _register(caller: Caller, url: str, events: list[str], secret: str | None = SECRET) -> str:
    body: dict[str, Any] = {"url": url, "events": events}
    if secret is not None:
        body["secret"] = secret
    response = caller.post("/webhooks", body)
    assert response.status_code == 201, response.content
    doc = response.json()
    assert set(doc) == {"webhookId"}
    return str(doc["webhookId"])


@cache
def _delivery_validator() -> jsonschema.Draft202012Validator:
    registry: Registry = Registry()
    for name in ("run-event.schema.json", "ids.schema.json"):
        schema = json.loads((SCHEMAS / name).read_text())
        registry = registry.with_resource(schema["$id"], Resource.from_contents(schema))
    root = json.loads((SCHEMAS / "webhook-delivery.schema.json").read_text())
    # The vendored copy lists workspaceId as required; the prose makes it conditional (reference f.1),
    # and these runs have no workspace. The event itself is checked strictly by assert_event_doc.
    root["required"] = ["runId", "event"]
    root["properties"]["event"] = {"type": "object"}
    return jsonschema.Draft202012Validator(root, registry=registry)


def test_register_deliver_signed(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for()
    webhook_id = _register(acme, url_of(receiver), ["run.completed"])
    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    [row] = deliveries()
    assert drive(row).status == DeliveryStatus.DELIVERED
    [seen] = receiver.received
    headers = {k.lower(): v for k, v in seen.headers.items()}
    assert headers["openwop-webhook-id"] == webhook_id
    assert headers["openwop-event-type"] == "run.completed"
    assert headers["openwop-signature-algorithm"] == "v1"
    timestamp = headers["openwop-timestamp"]
    assert timestamp.isdigit()
    expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + seen.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["openwop-signature"], f"sha256={expected}")
    doc = json.loads(seen.body)
    _delivery_validator().validate(doc)
    assert doc["runId"] == run_id and doc["event"]["runId"] == run_id and doc["event"]["type"] == "run.completed"
    assert_event_doc(doc["event"])
    assert "authorization" not in headers


def test_events_filter_and_tenant_scope(acme: Caller, globex: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for()
    _register(globex, url_of(receiver), ["run.completed", "node.started"])
    mine = _register(acme, url_of(receiver), ["node.started"])
    advance(acme.create_run("conformance-noop"))
    rows = deliveries()
    # Only acme's subscription, and only the type it asked for (webhook-cross-tenant-isolation).
    assert [(r.webhook.webhook_id, r.event_type) for r in rows if r.webhook] == [(mine, "node.started")]


@pytest.mark.parametrize(
    "url", ["http://hooks.example.com/x", "https://localhost/x", "https://169.254.169.254/x", "https://10.1.2.3/x"]
)
def test_a_forbidden_url_is_400_webhook_url_rejected(acme: Caller, url: str, settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []
    response = acme.post("/webhooks", {"url": url, "events": ["run.completed"]})
    assert_envelope(response, "webhook_url_rejected", 400)
    assert not Webhook.unscoped_all_tenants.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"url": "https://hooks.example.com/x", "events": []},
        {"url": "https://hooks.example.com/x"},
        {"url": "https://hooks.example.com/x", "events": ["run.completed"], "extra": 1},
        {"url": 7, "events": ["run.completed"]},
    ],
)
def test_a_malformed_body_is_400(acme: Caller, body: dict[str, Any]) -> None:
    assert_envelope(acme.post("/webhooks", body), "validation_error", 400)


def test_unregister_stops_scheduled_retries(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for(behaviour=Behaviour(status=500))
    webhook_id = _register(acme, url_of(receiver), ["run.completed"])
    advance(acme.create_run("conformance-noop"))
    [row] = deliveries()
    delivery_attempt(delivery_pk=row.pk)
    assert _delete(acme, f"/webhooks/{webhook_id}").status_code == 204
    delivery_attempt(delivery_pk=row.pk)  # the scheduled retry's message: nothing starts
    assert len(receiver.received) == 1
    assert not Delivery.unscoped_all_tenants.exists()
    assert_envelope(_delete(acme, f"/webhooks/{webhook_id}"), "not_found", 404)


def test_foreign_webhook_answers_as_unknown(
    acme: Caller, globex: Caller, receiver_for: Callable[..., Receiver]
) -> None:
    webhook_id = _register(acme, url_of(receiver_for()), ["run.completed"])
    unknown = "W" * 26
    for path in ("/webhooks/{}", "/webhooks/{}/dead-letters"):
        call = _delete if "dead" not in path else (lambda c, p: c.get(p))
        foreign = call(globex, path.format(webhook_id))
        missing = call(globex, path.format(unknown))
        assert_envelope(foreign, "not_found", 404)
        assert foreign.content == missing.content
    assert Webhook.unscoped_all_tenants.filter(webhook_id=webhook_id).exists()


def test_dead_letters_listed_without_body_or_secret(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 2
    receiver = receiver_for(behaviour=Behaviour(status=502))
    webhook_id = _register(acme, url_of(receiver), ["run.completed"])
    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    [row] = deliveries()
    assert drive(row).status == DeliveryStatus.DEAD
    response = acme.get(f"/webhooks/{webhook_id}/dead-letters")
    assert response.status_code == 200
    [record] = response.json()["deadLetters"]
    assert record["deliveryId"] == row.delivery_id and record["runId"] == run_id
    assert (record["eventType"], record["attempts"], record["lastStatusCode"]) == ("run.completed", 2, 502)
    assert {"body", "headers", "secret", "event"}.isdisjoint(record)
    assert "deadLetteredAt" in record and "expiresAt" in record
    assert SECRET not in response.content.decode() and SECRET not in caplog.text
    assert_envelope(acme.get(f"/webhooks/{webhook_id}/dead-letters?limit=x"), "validation_error", 400)


def test_dead_letters_page_with_an_opaque_cursor(
    acme: Caller, globex: Caller, receiver_for: Callable[..., Receiver], settings: Any
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 1
    receiver = receiver_for(behaviour=Behaviour(status=500))
    webhook_id = _register(acme, url_of(receiver), ["node.started", "run.completed"])
    other_id = _register(acme, url_of(receiver), ["run.completed"])
    for _ in range(3):
        advance(acme.create_run("conformance-noop"))
    for row in deliveries():
        assert drive(row).status == DeliveryStatus.DEAD
    base = f"/webhooks/{webhook_id}/dead-letters"
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        response = acme.get(base + "?limit=4" + (f"&cursor={cursor}" if cursor else ""))
        assert response.status_code == 200, response.content
        doc = response.json()
        assert len(doc["deadLetters"]) <= 4 and set(doc) <= {"deadLetters", "nextCursor"}
        seen += [record["deliveryId"] for record in doc["deadLetters"]]
        pages += 1
        cursor = doc.get("nextCursor")
        if cursor is None:
            break
        assert webhook_id not in cursor and "settled" not in cursor  # opaque: names nothing readable
    mine = Delivery.unscoped_all_tenants.filter(webhook__webhook_id=webhook_id).order_by("-settled_at", "-id")
    assert seen == [row.delivery_id for row in mine] and len(seen) == 6 and pages == 2  # newest first, no repeats
    # A page size above the advertised maxPageSize is clamped, not refused.
    assert len(acme.get(base + "?limit=100000").json()["deadLetters"]) == 6
    first = acme.get(base + "?limit=1").json()["nextCursor"]
    # A cursor belongs to one listing: another webhook's, a forged or a garbled one is a 400.
    assert_envelope(acme.get(f"/webhooks/{other_id}/dead-letters?cursor={first}"), "validation_error", 400)
    assert_envelope(acme.get(base + "?cursor=not-a-cursor"), "validation_error", 400)
    assert_envelope(acme.get(base + "?limit=0"), "validation_error", 400)
    # Cross-tenant: a foreign webhook with a valid cursor is the same 404 as an unknown one.
    foreign = globex.get(f"{base}?cursor={first}")
    assert_envelope(foreign, "not_found", 404)
    assert foreign.content == globex.get(f"/webhooks/{'W' * 26}/dead-letters?cursor={first}").content


def test_discovery_retry_policy_is_the_setting(client: Client, settings: Any) -> None:
    for attempts in (5, 3):
        settings.OPENWOP_PUSH_MAX_ATTEMPTS = attempts
        doc = json.loads(client.get("/.well-known/openwop").content)
        assert doc["webhooks"]["retryPolicy"] == {"maxAttempts": attempts, "backoff": "exponential"}


def test_admin_redeliver_calls_the_service(acme: Caller, receiver_for: Callable[..., Receiver], settings: Any) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 1
    receiver = receiver_for(behaviour=Behaviour(status=500))
    _register(acme, url_of(receiver), ["run.completed"])
    advance(acme.create_run("conformance-noop"))
    [row] = deliveries()
    assert drive(row).status == DeliveryStatus.DEAD
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-123456789"))
    listing = admin.get("/admin/push/deadletter/")
    assert listing.status_code == 200 and row.delivery_id in listing.content.decode()
    page = admin.get(f"/admin/push/delivery/{row.pk}/change/").content.decode()
    assert row.body not in page  # a dead letter names a delivery; it does not show the body
    response = admin.post("/admin/push/deadletter/", {"action": "redeliver", "_selected_action": [row.pk]})
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.status, row.max_attempts) == (DeliveryStatus.PENDING, 2)
    receiver.behaviour.status = 200
    assert drive(row).status == DeliveryStatus.DELIVERED
    assert admin.post(f"/admin/push/delivery/{row.pk}/delete/", {"post": "yes"}).status_code == 403


def test_discovery_webhooks_record(client: Client) -> None:
    doc = json.loads(client.get("/.well-known/openwop").content)
    record = doc["webhooks"]
    schema = json.loads((SPEC / "openwop-v2/spec/v2/facets/webhooks.schema.json").read_text())
    jsonschema.validate(record, schema)
    assert record["status"] == "stable" and record["witness"] == "witnessable-gated"
    assert record["signatureAlgorithms"] == ["v1"]
    assert record["retryPolicy"]["backoff"] == "exponential" and record["retryPolicy"]["maxAttempts"] >= 1
    assert set(record["deadLetter"]) == {"retentionDays", "maxPageSize"}
