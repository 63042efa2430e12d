"""Push delivery rows: A2A push configs, OpenWOP webhooks, and one row per delivery and per attempt.

Saleor's habit (STYLE.md): the delivery, each attempt and each dead letter are rows, and the retry
policy lives on the delivery row, not in a worker's memory, so a killed worker loses nothing
(webhooks.md §Durability). Credentials are never stored in the clear: `PushConfig.credentials_sealed`
and `Webhook.secret_sealed` are Fernet tokens under a key derived from SECRET_KEY (crypto.py), kept
in this app's tables, apart from run data (interop.md §A2A push delivery).
"""

from __future__ import annotations

from django.db import models

from apps.runs.models import Run, RunEvent
from apps.tenants.models import TenantOwnedModel


class PushConfig(TenantOwnedModel):
    """An A2A TaskPushNotificationConfig. `config_id` is minted opaque: it encodes no tenant."""

    config_id = models.CharField(max_length=128, unique=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2048)
    auth_scheme = models.CharField(max_length=64, blank=True, default="")
    credentials_sealed = models.BinaryField(
        null=True, blank=True, editable=False, help_text="Fernet token of the credential; wiped on delete/final push."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    credentials_wiped_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at", "id"]
        verbose_name = "A2A push config"

    def __str__(self) -> str:
        return self.config_id


class Webhook(TenantOwnedModel):
    """An OpenWOP webhook subscription (webhooks.md §Surfaces)."""

    webhook_id = models.CharField(max_length=128, unique=True)
    url = models.URLField(max_length=2048)
    events = models.JSONField(default=list, help_text="v2 event type names this subscription receives.")
    secret_sealed = models.BinaryField(editable=False, help_text="Fernet token of the HMAC secret.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.webhook_id


class WebhookEvent(TenantOwnedModel):
    """One (webhook, event type) pair: the index `push_deliveries_for_events` looks up on every
    event append, so a tenant whose webhooks want other event types costs one indexed probe, not a
    scan of its webhooks. Written only by `webhook_register`, in the webhook's transaction;
    `Webhook.events` keeps the registered list as the caller sent it."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="event_types")
    event_type = models.CharField(max_length=100)

    class Meta(TenantOwnedModel.Meta):
        indexes = [models.Index(fields=["tenant", "event_type"], name="push_webhook_event_lookup")]
        constraints = [
            models.UniqueConstraint(fields=["webhook", "event_type"], name="push_webhook_event_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.event_type}"


class PushLane(models.Model):
    """One destination origin (`https://host:port`): the row whose lock serialises claims on the
    lane, so the in-flight cap holds across every worker (lanes.py). Not tenant-owned: a hung
    receiver is hung for every tenant that sends to it. Holds no URL path, query or credential."""

    origin = models.CharField(max_length=300, unique=True)
    touched_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.origin


class DeliveryKind(models.TextChoices):
    A2A_PUSH = "a2a_push", "A2A push"
    WEBHOOK = "webhook", "OpenWOP webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    DELIVERED = "delivered", "delivered"
    DEAD = "dead", "dead"


class Delivery(TenantOwnedModel):
    """One (target, event) pair. The body is serialised once, so every attempt sends the same bytes."""

    delivery_id = models.CharField(max_length=128, unique=True)
    kind = models.CharField(max_length=16, choices=DeliveryKind.choices)
    push_config = models.ForeignKey(PushConfig, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(Webhook, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    # No foreign key in the database for the event: the delivery's run is one (above), the event is
    # that run's and the run log refuses DELETEs but retention's, which deletes the deliveries first
    # in the same transaction. The constraint could never fire; it cost retention's batch a check
    # per expired event at COMMIT (2,000 a batch, up to half the COMMIT) while the doors wait for CPU.
    event = models.ForeignKey(RunEvent, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    event_type = models.CharField(max_length=100)
    body = models.TextField(help_text="The exact JSON text sent on every attempt.")
    is_final = models.BooleanField(default=False, help_text="The task's final push: credentials go once it settles.")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    next_attempt_at = models.DateTimeField()
    in_flight_until = models.DateTimeField(null=True, blank=True, help_text="Claim of the attempt under way.")
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True, default="")
    queue = models.CharField(max_length=200, help_text="Celery queue this delivery's attempts are sent to.")
    lane = models.CharField(max_length=300, default="", help_text="Destination origin: at most LANE_CAP in flight.")
    parked = models.BooleanField(default=False, help_text="Due, but its lane was full; the lane wakes it.")
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True, help_text="Delivered or dead-lettered at.")

    class Meta(TenantOwnedModel.Meta):
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="push_delivery_due"),
            models.Index(fields=["lane", "status"], name="push_delivery_lane"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(kind="a2a_push", push_config__isnull=False, webhook__isnull=True)
                    | models.Q(kind="webhook", webhook__isnull=False, push_config__isnull=True)
                ),
                name="push_delivery_one_target",
            ),
            models.CheckConstraint(condition=models.Q(status__in=DeliveryStatus.values), name="push_delivery_status"),
            models.UniqueConstraint(fields=["push_config", "event"], name="push_delivery_config_event_unique"),
            models.UniqueConstraint(fields=["webhook", "event"], name="push_delivery_webhook_event_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.kind} {self.event_type} ({self.status})"


class DeadLetter(Delivery):
    """Operators' view of dead-lettered deliveries (the admin filters on status=dead)."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"


class DeliveryAttempt(TenantOwnedModel):
    """One attempt: what came back and how long it took. Never the body, headers or credentials."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=200, blank=True, default="")
    at = models.DateTimeField()

    class Meta(TenantOwnedModel.Meta):
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="push_attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number} {self.status_code or self.error}"
