"""Writes for push delivery: A2A push configs, webhooks, and the delivery rows an event creates.

The A2A door calls the four `push_config_*` services; the REST door calls `webhook_*`. Every
lookup of a config goes through `run_get_readable` first, so an unreadable task, a foreign
configId and an unknown one all raise the same NotFound (interop.md §A2A push delivery).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import cache, partial
from typing import Any

from a2a.types import AuthenticationInfo, StreamResponse, TaskPushNotificationConfig, TaskState
from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.core.egress import egress_check_url
from apps.core.errors import Conflict, NotFound, ValidationFailed, vendor_code
from apps.core.ids import mint_opaque
from apps.push.capabilities import push_max_attempts
from apps.push.crypto import credential_seal
from apps.push.lanes import lane_of, lane_wake
from apps.push.limits import push_registration_check
from apps.push.models import Delivery, DeliveryKind, DeliveryStatus, PushConfig, Webhook, WebhookEvent
from apps.runs.a2a_wire import TERMINAL_STATES, StreamProjection, context_id_of, to_wire
from apps.runs.models import Run, RunEvent
from apps.runs.selectors import run_get_readable
from apps.runs.wire import run_event_doc
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)

# One message for a missing task and a missing config alike: the door renders one answer for both.
NO_SUCH_PUSH_CONFIG = "No such task or push notification config."
NO_SUCH_WEBHOOK = "No such webhook."
MAX_SECRET_LENGTH = 512
# A dead push whose config's credential was discarded cannot be redelivered (it would go without it).
PUSH_CREDENTIAL_DISCARDED = vendor_code("push_credential_discarded", 409)


# ---------------------------------------------------------------------------------------------
# A2A push configs


def _task_readable(*, subject: Subject, task_id: str) -> Run:
    try:
        return run_get_readable(subject=subject, run_id=task_id)
    except NotFound:
        raise NotFound(NO_SUCH_PUSH_CONFIG) from None


def push_config_wire(config: PushConfig) -> TaskPushNotificationConfig:
    """`{id, taskId, url, authentication: {scheme}}`: never the token or the credentials."""
    wire = TaskPushNotificationConfig(id=config.config_id, task_id=config.run.run_id, url=config.url)
    if config.auth_scheme:
        wire.authentication.CopyFrom(AuthenticationInfo(scheme=config.auth_scheme))
    return wire


def push_config_create(
    *,
    subject: Subject,
    task_id: str,
    url: str,
    token: str | None = None,
    authentication: dict[str, Any] | None = None,
) -> PushConfig:
    """Register a push config on a readable task. Raises NotFound (task), EgressRefused (url,
    400 webhook_url_rejected on REST) or ValidationFailed (authentication shape)."""
    run = _task_readable(subject=subject, task_id=task_id)
    with transaction.atomic():
        # A finished task pushes nothing more: its credential is never kept.
        return _push_config_add(run=run, url=url, token=token, authentication=authentication, keep=not run.is_terminal)


def push_config_attach(
    *, run: Run, url: str, token: str | None = None, authentication: dict[str, Any] | None = None
) -> PushConfig:
    """A config that comes with the request creating or resuming `run` (A2A SendMessage's
    `configuration`), written in that request's transaction before the run's new events: each of
    them is owed to it, the final push of a run settled in the same transaction included, so its
    credential is kept until that push settles. Raises as `push_config_create`."""
    return _push_config_add(run=run, url=url, token=token, authentication=authentication, keep=True)


def _push_config_add(
    *, run: Run, url: str, token: str | None, authentication: dict[str, Any] | None, keep: bool
) -> PushConfig:
    egress_check_url(url)
    push_registration_check(tenant_id=run.tenant_id, run=run)
    scheme, credentials = "", None
    if authentication:
        scheme = str(authentication.get("scheme") or "")
        raw = authentication.get("credentials")
        if not scheme or not isinstance(scheme, str) or (raw is not None and not isinstance(raw, str)):
            raise ValidationFailed("authentication needs a scheme and string credentials.")
        credentials = raw or None
    if token is not None and not isinstance(token, str):
        raise ValidationFailed("token must be a string.")
    if credentials is None and token:
        scheme, credentials = scheme or "Bearer", token  # interop.md: token alone -> `Bearer <token>`
    if not keep:
        credentials = None
    return PushConfig.objects.create(
        tenant_id=run.tenant_id,
        config_id=mint_opaque(),
        run=run,
        url=url,
        auth_scheme=scheme,
        credentials_sealed=credential_seal(credentials) if credentials else None,
    )


def push_config_get(*, subject: Subject, task_id: str, config_id: str) -> PushConfig:
    run = _task_readable(subject=subject, task_id=task_id)
    config = (
        PushConfig.objects.for_tenant(run.tenant_id).select_related("run").filter(run=run, config_id=config_id).first()
    )
    if config is None:
        raise NotFound(NO_SUCH_PUSH_CONFIG)
    return config


def push_config_list(*, subject: Subject, task_id: str) -> list[PushConfig]:
    run = _task_readable(subject=subject, task_id=task_id)
    return list(PushConfig.objects.for_tenant(run.tenant_id).select_related("run").filter(run=run))


def push_config_delete(*, subject: Subject, task_id: str, config_id: str) -> None:
    """Idempotent: deleting an absent config of a readable task succeeds. The row goes, and with
    it the sealed credential and every pending delivery (no further attempt starts)."""
    run = _task_readable(subject=subject, task_id=task_id)
    with transaction.atomic():
        configs = PushConfig.objects.for_tenant(run.tenant_id).filter(run=run, config_id=config_id)
        _deliveries_lock(Delivery.objects.for_tenant(run.tenant_id).filter(push_config__in=configs))
        configs.delete()


def push_config_credentials_wipe(*, config_pk: int) -> None:
    PushConfig.unscoped_all_tenants.filter(pk=config_pk, credentials_sealed__isnull=False).update(
        credentials_sealed=None, credentials_wiped_at=timezone.now()
    )


def push_config_exhausted(*, config_pk: int) -> bool:
    """No delivery of the config can still be attempted: its task's final push settled and none
    is pending (the moment its credential may go; a dead letter is only redelivered with it)."""
    deliveries = Delivery.unscoped_all_tenants.filter(push_config_id=config_pk)
    final_settled = deliveries.filter(is_final=True).exclude(status=DeliveryStatus.PENDING).exists()
    return final_settled and not deliveries.filter(status=DeliveryStatus.PENDING).exists()


# ---------------------------------------------------------------------------------------------
# Webhooks


def webhook_register(*, subject: Subject, url: str, events: list[str], secret: str | None = None) -> Webhook:
    egress_check_url(url)
    if not events or not all(isinstance(e, str) and e for e in events):
        raise ValidationFailed("events must be a non-empty list of event type names.", details={"field": "events"})
    if secret is None:
        secret = mint_opaque(43)
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_LENGTH:
        raise ValidationFailed("secret must be a non-empty string.", details={"field": "secret"})
    tenant_pk = subject_tenant_pk(subject)
    push_registration_check(tenant_id=tenant_pk)
    with transaction.atomic(durable=True):
        webhook = Webhook.objects.create(
            tenant_id=tenant_pk,
            webhook_id=mint_opaque(),
            url=url,
            events=sorted(set(events)),
            secret_sealed=credential_seal(secret),
        )
        WebhookEvent.objects.for_tenant(tenant_pk).bulk_create(
            [WebhookEvent(tenant_id=tenant_pk, webhook=webhook, event_type=name) for name in webhook.events]
        )
        return webhook


def webhook_get(*, subject: Subject, webhook_id: str) -> Webhook:
    webhook = Webhook.objects.for_tenant(subject_tenant_pk(subject)).filter(webhook_id=webhook_id).first()
    if webhook is None:
        raise NotFound(NO_SUCH_WEBHOOK)
    return webhook


def webhook_unregister(*, subject: Subject, webhook_id: str) -> None:
    """Deleting the row deletes its deliveries, so no further attempt starts, retries included
    (webhooks.md §Durability, invariant webhook-unregister-stops-delivery)."""
    with transaction.atomic(durable=True):
        webhook = webhook_get(subject=subject, webhook_id=webhook_id)
        _deliveries_lock(Delivery.objects.for_tenant(webhook.tenant_id).filter(webhook=webhook))
        webhook.delete()


def _deliveries_lock(deliveries: QuerySet[Delivery]) -> None:
    """Lock a target's deliveries before the cascade: an attempt recording its outcome holds its
    row's lock, so the delete waits for it and then collects its attempt row too (otherwise the
    late attempt row would break the foreign key at commit)."""
    list(deliveries.select_for_update().order_by("pk").values_list("pk", flat=True))


# ---------------------------------------------------------------------------------------------
# Deliveries


def _delivery_new(run: Run, event: RunEvent, *, url: str, **fields: Any) -> Delivery:
    return Delivery(
        tenant_id=run.tenant_id,
        run=run,
        event=event,
        event_type=event.type,
        delivery_id=mint_opaque(),
        max_attempts=push_max_attempts(),
        next_attempt_at=timezone.now(),
        queue=settings.OPENWOP_PUSH_QUEUE,
        lane=lane_of(url),
        **fields,
    )


def _push_status_updates(run: Run, events: Sequence[RunEvent]) -> dict[int, StreamResponse]:
    """The statusUpdate each event produces, by its sequence, for the events that change the
    task's state (a2a_wire.StreamProjection folded over the log up to each). The log before the first
    event is read only when there is one: a run created in this transaction has none."""
    projection = StreamProjection(
        task_id=run.run_id, context_id=context_id_of(run), state=TaskState.TASK_STATE_SUBMITTED
    )
    if events[0].sequence > 1:
        earlier = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run, sequence__lt=events[0].sequence)
        projection.project(earlier.order_by("sequence"))
    updates: dict[int, StreamResponse] = {}
    for event in events:
        changed = [r for r in projection.project([event]) if r.HasField("status_update")]
        if changed:
            updates[event.sequence] = changed[-1]
    return updates


@cache
def _push_targets_sql(event_types: int) -> str:
    # Our own table and column names, from the models' _meta; the values are bound parameters.
    config = PushConfig._meta
    webhook_event = WebhookEvent._meta
    wanted = ", ".join(["%s"] * event_types)
    return (
        f"SELECT %s, {config.pk.column}, '' FROM {config.db_table}"  # noqa: S608
        f" WHERE {config.get_field('tenant').column} = %s AND {config.get_field('run').column} = %s"
        f" UNION ALL SELECT %s, {webhook_event.get_field('webhook').column},"
        f" {webhook_event.get_field('event_type').column} FROM {webhook_event.db_table}"
        f" WHERE {webhook_event.get_field('tenant').column} = %s"
        f" AND {webhook_event.get_field('event_type').column} IN ({wanted})"
    )


def _push_targets(run: Run, event_types: list[str]) -> tuple[list[int], dict[str, list[int]]]:
    """The pks of the run's push configs, and of the tenant's webhooks by the event type they want
    among `event_types`, in one indexed round trip (a UNION of two probes, both scoped to the run's
    tenant). Plain SQL: it runs on every append, and building the ORM's UNION cost more CPU than
    the query (11 % of an MCP tools/call in bench/profile.py)."""
    sql = _push_targets_sql(len(event_types))
    params: list[Any] = [DeliveryKind.A2A_PUSH.value, run.tenant_id, run.pk, DeliveryKind.WEBHOOK.value, run.tenant_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *event_types])
        found = cursor.fetchall()
    webhooks: dict[str, list[int]] = {}
    for kind, pk, event_type in sorted(found, key=lambda row: row[1]):
        if kind == DeliveryKind.WEBHOOK:
            webhooks.setdefault(event_type, []).append(pk)
    return sorted(pk for kind, pk, _ in found if kind == DeliveryKind.A2A_PUSH), webhooks


def push_deliveries_for_events(*, run: Run, events: Sequence[RunEvent]) -> None:
    """Called by `runs.log` inside the transaction that appends `events` (saved, in sequence
    order): the delivery rows commit with the events (or not at all), and the attempts are sent on
    commit. One indexed query when nothing is registered, however many events. Read per append,
    never cached, so a config or webhook registered mid-run gets every event appended after its
    registration committed."""
    if not events:
        return
    config_pks, webhook_pks = _push_targets(run, sorted({event.type for event in events}))
    if not config_pks and not webhook_pks:
        return
    configs = list(PushConfig.objects.for_tenant(run.tenant_id).filter(pk__in=config_pks).order_by("id"))
    wanted = sorted({pk for pks in webhook_pks.values() for pk in pks})
    webhooks = {w.pk: w for w in Webhook.objects.for_tenant(run.tenant_id).filter(pk__in=wanted)}
    updates = _push_status_updates(run, events) if configs else {}
    rows: list[Delivery] = []
    for event in events:
        update = updates.get(event.sequence)
        if update is not None:
            body = json.dumps(to_wire(update), separators=(",", ":"))
            final = update.status_update.status.state in TERMINAL_STATES
            rows += [
                _delivery_new(
                    run, event, url=c.url, kind=DeliveryKind.A2A_PUSH, push_config=c, body=body, is_final=final
                )
                for c in configs
            ]
        targets = [webhooks[pk] for pk in webhook_pks.get(event.type, []) if pk in webhooks]
        if targets:
            # webhooks.md §Delivery: {runId, event} with the event verbatim; no workspaceId (none here).
            envelope = {"runId": run.run_id, "event": run_event_doc(event, run_id=run.run_id)}
            body = json.dumps(envelope, separators=(",", ":"))
            rows += [
                _delivery_new(run, event, url=w.url, kind=DeliveryKind.WEBHOOK, webhook=w, body=body) for w in targets
            ]
    if not rows:
        return
    # A lane with a backlog serves it oldest first (lanes.py): a new row joins the backlog parked,
    # with no message, so a hung destination's deliveries cost the worker pool nothing until their
    # lane has room. The wake after commit closes the race with the lane draining meanwhile.
    # Unscoped on purpose: a lane is a destination shared by every tenant; only lane names are read.
    backlogged = set(
        Delivery.unscoped_all_tenants.filter(
            lane__in={row.lane for row in rows}, status=DeliveryStatus.PENDING, parked=True
        ).values_list("lane", flat=True)
    )
    for row in rows:
        row.parked = row.lane in backlogged
        row.save(force_insert=True)
        if not row.parked:
            transaction.on_commit(partial(delivery_enqueue, delivery_pk=row.pk, queue=row.queue, countdown=0.0))
    for lane in backlogged:
        transaction.on_commit(partial(lane_wake, lane, delivery_enqueue))


def delivery_enqueue(*, delivery_pk: int, queue: str, countdown: float) -> None:
    """Send `push.deliver` for a committed delivery row. A broker that refuses the message (down,
    unreachable) is not the caller's error: the row stays pending and due, and the push sweeper
    sends it once the broker is back (as `runs.services.advance_send`)."""
    from apps.push.tasks import deliver

    try:
        deliver.apply_async(args=[delivery_pk], queue=queue, countdown=countdown)
    except Exception as exc:  # kombu's and the transport's errors alike
        # The class name only: a broker error's text may carry its URL, and so its password.
        logger.warning(
            "delivery %s: push.deliver not sent (%s); the sweeper re-sends it", delivery_pk, type(exc).__name__
        )


def delivery_redeliver(*, delivery_pk: int) -> Delivery:
    """Operator action: a dead letter goes back to pending with a fresh attempt budget. Raises
    Conflict (`push_credential_discarded`) for a push whose config's credential is gone."""
    with transaction.atomic(durable=True):
        delivery = Delivery.unscoped_all_tenants.select_for_update().get(pk=delivery_pk)
        if delivery.status != DeliveryStatus.DEAD:
            return delivery
        config = delivery.push_config
        if config is not None and config.credentials_wiped_at is not None:
            # Sending it now would send it without the credential its receiver expects.
            raise Conflict(
                PUSH_CREDENTIAL_DISCARDED,
                "This push's credential was discarded when its task's final push settled; it cannot be"
                " redelivered. The client recovers with GetTask.",
            )
        delivery.status = DeliveryStatus.PENDING
        delivery.max_attempts = delivery.attempts + push_max_attempts()
        delivery.next_attempt_at = timezone.now()
        delivery.in_flight_until = None
        delivery.settled_at = None
        delivery.save(update_fields=["status", "max_attempts", "next_attempt_at", "in_flight_until", "settled_at"])
        logger.info("delivery %s redelivered by an operator", delivery.delivery_id)
        transaction.on_commit(partial(delivery_enqueue, delivery_pk=delivery.pk, queue=delivery.queue, countdown=0.0))
    return delivery
