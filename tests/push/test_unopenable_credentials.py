"""A delivery whose credential no key opens is dead-lettered at its claim, with that reason,
counted and logged once, and recovers once the key is back (interop.md §A2A push delivery;
webhooks.md §Durability). In-process against real HTTPS receivers on loopback; the live round
trip through a rotation is tests/push/test_live_secret_rotation.py.

Before, such a row raised InvalidToken on every try and stayed pending for ever (attempts 0)."""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from apps.core.logformat import record_context
from apps.push import engine, services
from apps.push.engine import CREDENTIAL_UNOPENABLE, delivery_attempt
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus
from apps.push.services import delivery_redeliver, push_config_create, webhook_register
from tests.core.https_receivers import Receiver
from tests.push.conftest import deliveries, drive, url_of
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db

OLD_KEY = "rotation-test-old-key-" + "o" * 40
NEW_KEY = "rotation-test-new-key-" + "n" * 40
TOKEN = "tok-unopenable-7c2e-not-for-logs"
HOOK_SECRET = "whsec-unopenable-91ab-not-for-logs"


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sent: list[int] = []

    def _enqueue(*, delivery_pk: int, queue: str, countdown: float) -> None:
        sent.append(delivery_pk)

    monkeypatch.setattr(engine, "delivery_enqueue", _enqueue)
    monkeypatch.setattr(services, "delivery_enqueue", _enqueue)
    return sent


def _dead_lettered(reason: str) -> float:
    return REGISTRY.get_sample_value("openwop_push_dead_lettered_total", {"reason": reason}) or 0.0


def _signed_by(secret: str, seen: Any) -> bool:
    timestamp = seen.headers["OpenWOP-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + seen.body, hashlib.sha256).hexdigest()
    return bool(seen.headers["OpenWOP-Signature"] == f"sha256={expected}")


def test_an_unopenable_credential_dead_letters_at_once_then_redelivers_once_the_key_is_back(
    acme: Caller,
    globex: Caller,
    receiver_for: Callable[..., Receiver],
    settings: Any,
    enqueued: list[int],
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = receiver_for()
    settings.SECRET_KEY = OLD_KEY
    webhook = webhook_register(
        subject=acme.subject, url=url_of(receiver, path="/hook"), events=["run.completed"], secret=HOOK_SECRET
    )
    run_id = acme.create_run("conformance-approval")  # waits for input: its config keeps its credential
    push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver, path="/push"), token=TOKEN)
    advance(run_id)
    noop = acme.create_run("conformance-noop")
    advance(noop)
    rows = deliveries()
    assert {d.kind for d in rows} == {"a2a_push", "webhook"}

    # DJANGO_SECRET_KEY changed, the old key not among the fallbacks.
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, []
    before = _dead_lettered(CREDENTIAL_UNOPENABLE)
    with django_capture_on_commit_callbacks(execute=True):
        for row in rows:
            delivery_attempt(delivery_pk=row.pk)  # one claim each: no retry loop
    for row in deliveries():
        assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.DEAD, 0, CREDENTIAL_UNOPENABLE), row
    assert receiver.received == [] and not DeliveryAttempt.unscoped_all_tenants.exists()
    assert _dead_lettered(CREDENTIAL_UNOPENABLE) == before + len(rows)
    # Logged once per delivery, with its id and tenant; never the credential or the secret.
    for row in rows:
        lines = [r.getMessage() for r in caplog.records if row.delivery_id in r.getMessage()]
        assert len(lines) == 1 and "tenant acme" in lines[0] and "DJANGO_SECRET_KEY_FALLBACKS" in lines[0], lines
    assert TOKEN not in caplog.text and HOOK_SECRET not in caplog.text
    # Its fields too (issue 51 item 3): tenant, operation, delivery id and its config or webhook.
    for row in rows:
        [line] = [r for r in caplog.records if row.delivery_id in r.getMessage()]
        context = record_context(line)
        assert (context["tenant"], context["operation"]) == ("acme", "push.deliver")
        assert context["deliveryId"] == row.delivery_id
        config, webhook = row.push_config, row.webhook
        target = {"configId": config.config_id} if config is not None else {"webhookId": webhook.webhook_id}
        assert context.items() >= target.items(), context

    # The tenant's dead-letter read says why; another tenant's read is an unknown webhook's.
    page = acme.get(f"/webhooks/{webhook.webhook_id}/dead-letters")
    assert page.status_code == 200, page.content
    [record] = page.json()["deadLetters"]
    assert (record["lastError"], record["attempts"]) == (CREDENTIAL_UNOPENABLE, 0)
    foreign = globex.get(f"/webhooks/{webhook.webhook_id}/dead-letters")
    unknown = globex.get("/webhooks/no-such-webhook-00000000/dead-letters")
    assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content

    # The old key comes back as a fallback: an operator's redelivery goes out with the right
    # credential and signature (the pushes of the waiting task: its config kept the credential).
    settings.SECRET_KEY_FALLBACKS = [OLD_KEY]
    for row in rows:
        delivery_redeliver(delivery_pk=row.pk)
    for row in rows:
        assert drive(Delivery.unscoped_all_tenants.get(pk=row.pk)).status == DeliveryStatus.DELIVERED
    pushes = [seen for seen in receiver.received if seen.path == "/push"]
    hooks = [seen for seen in receiver.received if seen.path == "/hook"]
    assert pushes and {seen.headers["Authorization"] for seen in pushes} == {f"Bearer {TOKEN}"}
    assert len(hooks) == 1 and _signed_by(HOOK_SECRET, hooks[0])


def test_a_fallback_key_opens_what_the_old_key_sealed(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, enqueued: list[int]
) -> None:
    """The rotation the fallback exists for: nothing dead-letters, every push carries its credential."""
    receiver = receiver_for()
    settings.SECRET_KEY = OLD_KEY
    webhook_register(subject=acme.subject, url=url_of(receiver, path="/hook"), events=["run.completed"],
                     secret=HOOK_SECRET)  # fmt: skip
    run_id = acme.create_run("conformance-noop")
    push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver, path="/push"), token=TOKEN)
    advance(run_id)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, [OLD_KEY]
    for row in deliveries():
        assert drive(row).status == DeliveryStatus.DELIVERED
    assert {seen.headers.get("Authorization") for seen in receiver.received if seen.path == "/push"} == {
        f"Bearer {TOKEN}"
    }
    [hook] = [seen for seen in receiver.received if seen.path == "/hook"]
    assert _signed_by(HOOK_SECRET, hook)
