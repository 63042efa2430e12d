"""One delivery attempt, and the sweeper that finds deliveries whose message was lost.

An attempt is three moves (STYLE.md habits 3 and 8; webhooks.md §Durability):
1. claim, under the row lock and then the lane lock (lanes.py): the row must be pending, due, and
   not claimed by a live attempt, and its lane must have a free slot (else the row is parked);
   the claim (`in_flight_until`) and the attempt count commit before anything is sent;
2. send, outside any transaction, through the egress guard with a short timeout;
3. record the attempt row and the outcome under the same locks; schedule the retry and wake the
   lane's next parked row on commit.
The `push.deliver` task (`delivery_dispatch`) does 1 on the Celery slot and hands 2-3 to a sender
thread, so a hung receiver never holds a pool slot. A worker killed between 1 and 3 leaves a claim
that expires; the sweeper then re-enqueues the row (at-least-once). Duplicate messages are
harmless: only one of them can win the claim.

Three rules keep a push what its task's client expects:
- every attempt has an overall deadline (the attempt timeout, for connect, TLS, headers and body
  together) well inside its claim, so a claim never lapses while its attempt is still open; and
  the attempt budget is checked at the claim, so a claim that lapsed anyway (a killed worker)
  cannot buy an attempt past `max_attempts`: the row is dead-lettered instead;
- the pushes of one config (one task, one receiver) go out in event order: a row waits while an
  earlier row of its config is pending, and the earlier row wakes it when it settles;
- the config's credential is discarded only once no delivery of it can still be attempted (the
  final push settled and nothing is pending), and a push is never sent without a credential its
  config had: a row that would be is dead-lettered (`credential_discarded`).

A credential (push) or secret (webhook) that no key opens (DJANGO_SECRET_KEY changed without its
predecessor in DJANGO_SECRET_KEY_FALLBACKS) can never be sent: the row is dead-lettered at its
claim (`credential_unopenable`, no attempt), counted and logged once with its tenant, rather than
failing every retry for ever. An operator redelivers it once the key is back (admin).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import httpx
from django.db import transaction
from django.utils import timezone

from apps.core import tracing
from apps.core.egress import EgressRefused, sanitize_url
from apps.core.egress_transport import egress_request
from apps.core.logformat import log_bind, log_scoped
from apps.core.metrics import push_attempt_settled, push_dead_lettered
from apps.core.sealing import InvalidToken
from apps.push.capabilities import DEAD_LETTER_RETENTION_DAYS, push_setting
from apps.push.crypto import credential_open
from apps.push.lanes import lane_cap, lane_in_flight, lane_lock, lane_wake, senders
from apps.push.models import Delivery, DeliveryAttempt, DeliveryKind, DeliveryStatus
from apps.push.services import delivery_enqueue, push_config_credentials_wipe, push_config_exhausted

logger = logging.getLogger(__name__)

A2A_CONTENT_TYPE = "application/a2a+json"
# A message that arrives this early (clock skew between broker and worker) still counts as due.
DUE_TOLERANCE = timedelta(seconds=1)
# The reason a delivery whose credential no key opens is dead-lettered with (Delivery.last_error).
CREDENTIAL_UNOPENABLE = "credential_unopenable"
# Every sender thread of this process busy: the message comes back this much later.
SENDERS_BUSY_RETRY_SECONDS = 0.5


def attempt_timeout_seconds() -> float:
    return push_setting("OPENWOP_PUSH_ATTEMPT_TIMEOUT")


def backoff_seconds(attempts: int) -> float:
    """Exponential backoff with equal jitter: half the step fixed, half random (retryPolicy)."""
    base = push_setting("OPENWOP_PUSH_BACKOFF_BASE_SECONDS")
    ceiling = push_setting("OPENWOP_PUSH_BACKOFF_MAX_SECONDS")
    step = min(ceiling, base * (2 ** max(0, attempts - 1)))
    return step / 2 + random.uniform(0, step / 2)


def claim_seconds() -> float:
    # The attempt's overall deadline is the attempt timeout; the claim outlives it by a wide margin
    # (sender start, recording the outcome), so it never lapses while its attempt is open.
    return attempt_timeout_seconds() * 3 + 10


@dataclass(frozen=True)
class _Claimed:
    pk: int
    number: int
    kind: str
    lane: str
    url: str
    body: bytes
    headers: dict[str, str]


def _headers(delivery: Delivery) -> tuple[str, dict[str, str]]:
    if delivery.kind == DeliveryKind.A2A_PUSH:
        config = delivery.push_config
        assert config is not None
        headers = {"Content-Type": A2A_CONTENT_TYPE, "A2A-Version": "1.0"}
        # No OpenWOP signature on a push (interop.md §A2A push delivery).
        if config.auth_scheme and config.credentials_sealed:
            headers["Authorization"] = f"{config.auth_scheme} {credential_open(config.credentials_sealed)}"
        return config.url, headers
    webhook = delivery.webhook
    assert webhook is not None
    timestamp = str(int(time.time()))
    secret = credential_open(webhook.secret_sealed)
    signature = hmac.new(secret.encode(), f"{timestamp}.{delivery.body}".encode(), hashlib.sha256).hexdigest()
    return webhook.url, {
        "Content-Type": "application/json",
        "OpenWOP-Webhook-Id": webhook.webhook_id,
        "OpenWOP-Event-Type": delivery.event_type,
        "OpenWOP-Timestamp": timestamp,
        "OpenWOP-Signature": f"sha256={signature}",
        "OpenWOP-Signature-Algorithm": "v1",
    }


def _claim(delivery_pk: int) -> _Claimed | None:
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            Delivery.unscoped_all_tenants.select_for_update(of=("self",))
            .select_related("push_config", "webhook", "tenant")
            .filter(pk=delivery_pk)
            .first()
        )
        if delivery is None or delivery.status != DeliveryStatus.PENDING:
            return None  # deleted with its target, or already settled: nothing to do
        # The attempt's log lines (here and on its sender thread) name the delivery and its target.
        log_bind(
            tenant=delivery.tenant.slug, delivery_id=delivery.delivery_id,
            config_id=delivery.push_config.config_id if delivery.push_config is not None else None,
            webhook_id=delivery.webhook.webhook_id if delivery.webhook is not None else None,
        )  # fmt: skip
        if delivery.next_attempt_at > now + DUE_TOLERANCE:
            return None  # a stale message for an earlier attempt; the scheduled one will come
        if delivery.in_flight_until is not None and delivery.in_flight_until > now:
            return None  # another attempt is under way
        if delivery.attempts >= delivery.max_attempts:
            # Its last claimed attempt never recorded (a killed worker): the budget is spent.
            _settle(delivery, now, status=DeliveryStatus.DEAD, error="attempt_lost")
            return None
        if delivery.kind == DeliveryKind.A2A_PUSH:
            earlier_due = _earlier_pending_due(delivery)
            if earlier_due is not None:
                # Event order: an earlier push of this config is pending. It wakes this row when it
                # settles; until then this row is not due before it (keeps the sweeper quiet).
                if earlier_due > delivery.next_attempt_at:
                    delivery.next_attempt_at = earlier_due
                    delivery.save(update_fields=["next_attempt_at"])
                return None
            config = delivery.push_config
            assert config is not None
            if config.credentials_wiped_at is not None:
                # Never sent without the credential its config carried (a redelivered dead letter).
                _settle(delivery, now, status=DeliveryStatus.DEAD, error="credential_discarded")
                return None
        try:
            url, headers = _headers(delivery)
        except InvalidToken:
            # It may have been woken for a free slot it will not use: the lane's next row takes it.
            transaction.on_commit(partial(lane_wake, delivery.lane, delivery_enqueue))
            _settle(delivery, now, status=DeliveryStatus.DEAD, error=CREDENTIAL_UNOPENABLE)
            return None
        lane = delivery.lane
        lane_lock(lane)
        if lane_in_flight(lane) >= lane_cap():
            # The lane is full: park, and let the attempt that frees a slot wake this row.
            delivery.parked = True
            delivery.save(update_fields=["parked"])
            return None
        delivery.attempts += 1
        delivery.in_flight_until = now + timedelta(seconds=claim_seconds())
        delivery.parked = False
        delivery.save(update_fields=["attempts", "in_flight_until", "parked"])
        return _Claimed(delivery.pk, delivery.attempts, delivery.kind, lane, url, delivery.body.encode(), headers)


def _earlier_pending_due(delivery: Delivery) -> datetime | None:
    """When the oldest pending push of the same config before this one is due, or None."""
    earlier = Delivery.unscoped_all_tenants.filter(
        push_config_id=delivery.push_config_id, status=DeliveryStatus.PENDING, pk__lt=delivery.pk
    )
    return earlier.order_by("pk").values_list("next_attempt_at", flat=True).first()


def _settle(delivery: Delivery, now: datetime, *, status: str, error: str) -> None:
    """A row leaves pending without an attempt (inside the caller's transaction, row locked)."""
    delivery.status, delivery.settled_at, delivery.in_flight_until = status, now, None
    delivery.last_error = error
    delivery.save(update_fields=["status", "settled_at", "in_flight_until", "last_error"])
    if error == CREDENTIAL_UNOPENABLE:
        # Once per delivery (it is dead now), with what an operator needs and never the value.
        logger.error(
            "push delivery %s (%s, tenant %s) dead-lettered: its %s cannot be opened with DJANGO_SECRET_KEY or "
            "DJANGO_SECRET_KEY_FALLBACKS; put the key that sealed it back in DJANGO_SECRET_KEY_FALLBACKS and "
            "redeliver, or have the tenant register it again (manage.py doctor secrets lists them)",
            delivery.delivery_id, delivery.kind, delivery.tenant.slug,
            "credential" if delivery.kind == DeliveryKind.A2A_PUSH else "secret",
        )  # fmt: skip
    else:
        logger.info(
            "push delivery %s (%s) %s without an attempt: %s", delivery.delivery_id, delivery.kind, status, error
        )
    if status == DeliveryStatus.DEAD:
        transaction.on_commit(partial(push_dead_lettered, error))
    _settled(delivery)


def _settled(delivery: Delivery) -> None:
    """After a push settled (delivered or dead): wake the next pending push of its config, and
    discard the config's credential once none of its deliveries can still be attempted."""
    if delivery.kind != DeliveryKind.A2A_PUSH or delivery.push_config_id is None:
        return
    following = (
        Delivery.unscoped_all_tenants.filter(
            push_config_id=delivery.push_config_id, status=DeliveryStatus.PENDING, pk__gt=delivery.pk
        )
        .order_by("pk")
        .values_list("pk", "queue", "next_attempt_at")
        .first()
    )
    if following is not None:
        pk, queue, due = following
        countdown = max(0.0, (due - timezone.now()).total_seconds())
        transaction.on_commit(partial(delivery_enqueue, delivery_pk=pk, queue=queue, countdown=countdown))
    elif push_config_exhausted(config_pk=delivery.push_config_id):
        # interop.md §A2A push delivery: the credential is discarded once the task's final push
        # settled and no delivery of the config can still be attempted.
        push_config_credentials_wipe(config_pk=delivery.push_config_id)


def _send(claimed: _Claimed) -> None:
    """Send one claimed attempt and record its outcome (moves 2 and 3)."""
    attributes = {"openwop.delivery.kind": str(claimed.kind), "openwop.delivery.attempt": claimed.number}
    with tracing.span("openwop.push.attempt", attributes=attributes):
        started = time.monotonic()
        status_code: int | None = None
        try:
            timeout = attempt_timeout_seconds()
            response = egress_request(
                "POST",
                claimed.url,
                headers=claimed.headers,
                content=claimed.body,
                timeout=httpx.Timeout(timeout, connect=min(timeout, 3.0)),
                deadline_seconds=timeout,
                max_body_bytes=4096,
            )
            status_code, ok = response.status_code, response.ok
            error = "" if ok else (response.error or f"http_{status_code}")
        except EgressRefused as exc:
            ok, error = False, f"egress_refused:{exc.reason}"
        latency_ms = int((time.monotonic() - started) * 1000)
        _record(claimed, ok=ok, status_code=status_code, error=error[:200], latency_ms=latency_ms)


def delivery_attempt(*, delivery_pk: int) -> None:
    """One attempt of one delivery, start to end on the calling thread; a no-op when the row is
    not due, not ours to send, or its lane is full (then it is parked)."""
    with log_scoped(operation="push.deliver"):
        claimed = _claim(delivery_pk)
        if claimed is not None:
            _send(claimed)


def delivery_dispatch(*, delivery_pk: int) -> None:
    """The body of the `push.deliver` task: claim on the Celery slot, send on a sender thread, and
    return at once, so the slot is free again whatever the receiver does (lanes.py)."""
    if not senders.reserve():
        queue = Delivery.unscoped_all_tenants.filter(pk=delivery_pk).values_list("queue", flat=True).first()
        if queue is not None:
            delivery_enqueue(delivery_pk=delivery_pk, queue=queue, countdown=SENDERS_BUSY_RETRY_SECONDS)
        return
    with log_scoped(operation="push.deliver"):
        try:
            claimed = _claim(delivery_pk)
        except BaseException:
            senders.release()
            raise
        if claimed is None:
            senders.release()
            return
        senders.start(partial(_send, claimed))  # in this context: the sender's lines keep the scope


def _record(claimed: _Claimed, *, ok: bool, status_code: int | None, error: str, latency_ms: int) -> None:
    now = timezone.now()
    with transaction.atomic():
        delivery = Delivery.unscoped_all_tenants.select_for_update().filter(pk=claimed.pk).first()
        # The slot frees under the lane lock (same order as the claim: row, then lane), so a claim
        # that parks either sees it free or commits its park before the wake below looks.
        lane_lock(claimed.lane)
        transaction.on_commit(partial(lane_wake, claimed.lane, delivery_enqueue))
        if delivery is None:
            return  # its webhook or push config was deleted meanwhile
        DeliveryAttempt.objects.create(
            tenant_id=delivery.tenant_id,
            delivery=delivery,
            number=claimed.number,
            status_code=status_code,
            latency_ms=latency_ms,
            error=error,
            at=now,
        )
        if delivery.status != DeliveryStatus.PENDING or claimed.number != delivery.attempts:
            # A late attempt (its claim lapsed and the row moved on): its row is kept as evidence;
            # the row's state belongs to the attempt that holds it now.
            return
        delivery.in_flight_until = None
        delivery.last_status_code = status_code
        delivery.last_error = error
        if ok:
            delivery.status, delivery.settled_at = DeliveryStatus.DELIVERED, now
            result = "delivered"
        elif delivery.attempts >= delivery.max_attempts:
            delivery.status, delivery.settled_at = DeliveryStatus.DEAD, now
            result = "dead"  # a dead letter
        else:
            delivery.next_attempt_at = now + timedelta(seconds=backoff_seconds(delivery.attempts))
            result = "retry"
        transaction.on_commit(partial(push_attempt_settled, result))
        delivery.save(
            update_fields=[
                "in_flight_until",
                "last_status_code",
                "last_error",
                "status",
                "settled_at",
                "next_attempt_at",
            ]
        )
        logger.info(
            "push delivery %s (%s) attempt %s to %s: %s",
            delivery.delivery_id,
            claimed.kind,
            claimed.number,
            sanitize_url(claimed.url),
            "delivered" if ok else f"failed ({error}), now {delivery.status}",
        )
        if delivery.status == DeliveryStatus.PENDING:
            countdown = max(0.0, (delivery.next_attempt_at - now).total_seconds())
            transaction.on_commit(
                partial(delivery_enqueue, delivery_pk=delivery.pk, queue=delivery.queue, countdown=countdown)
            )
        else:
            _settled(delivery)


def deliveries_sweep() -> int:
    """Re-enqueue pending deliveries overdue by more than the grace with no live claim: their
    message was lost (a worker killed mid-attempt, a broker restart). Parked rows are their lane's
    to wake; the sweeper only wakes a lane whose slots are free yet whose rows wait past the grace
    (the attempt that should have woken them died). Returns how many messages were sent."""
    now = timezone.now()
    overdue = now - timedelta(seconds=push_setting("OPENWOP_PUSH_SWEEP_GRACE_SECONDS"))
    pending = Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=overdue)
    rows = list(pending.filter(parked=False).exclude(in_flight_until__gt=now).values_list("pk", "queue")[:500])
    sent = 0
    for pk, queue in rows:
        # Moving next_attempt_at keeps a merely slow queue from being re-sent on every tick; the
        # conditional update means several sweeping workers send one message per row.
        if Delivery.unscoped_all_tenants.filter(
            pk=pk, status=DeliveryStatus.PENDING, parked=False, next_attempt_at__lte=overdue
        ).update(next_attempt_at=now):
            delivery_enqueue(delivery_pk=pk, queue=queue, countdown=0.0)
            sent += 1
    lanes = pending.filter(parked=True).order_by("lane").values_list("lane", flat=True).distinct()[:100]
    for lane in list(lanes):
        sent += lane_wake(lane, delivery_enqueue)
    return sent


def dead_letters_purge() -> int:
    """Dead letters past the advertised retention go (webhooks.deadLetter.retentionDays)."""
    cutoff = timezone.now() - timedelta(days=DEAD_LETTER_RETENTION_DAYS)
    deleted, _ = Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.DEAD, settled_at__lt=cutoff).delete()
    return int(deleted)
