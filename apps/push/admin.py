"""Operators see deliveries, their attempts and dead letters. Read-only, except the "redeliver"
action, which calls a service (STYLE.md habit 15). No body, credential or secret is shown."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.errors import Conflict
from apps.push.models import DeadLetter, Delivery, DeliveryAttempt, DeliveryStatus, PushConfig, Webhook
from apps.push.services import delivery_redeliver


class DeliveryAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = DeliveryAttempt
    fields = ("number", "status_code", "latency_ms", "error", "at")
    readonly_fields = fields
    extra = 0


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "delivery_id",
        "tenant",
        "kind",
        "event_type",
        "status",
        "attempts",
        "max_attempts",
        "last_status_code",
        "next_attempt_at",
        "settled_at",
    )
    list_filter = ("status", "kind", "tenant")
    search_fields = ("delivery_id", "run__run_id", "webhook__webhook_id", "push_config__config_id")
    list_select_related = ("tenant",)
    date_hierarchy = "created_at"
    exclude = ("body",)  # a dead letter names a delivery; it does not replay one
    inlines = (DeliveryAttemptInline,)
    actions = ("redeliver",)

    @admin.action(description="Redeliver selected dead letters")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = 0
        for pk in queryset.filter(status=DeliveryStatus.DEAD).values_list("pk", flat=True):
            try:
                delivery = delivery_redeliver(delivery_pk=pk)
            except Conflict as refused:
                self.message_user(request, refused.message, messages.ERROR)
                continue
            self.log_change(request, delivery, "Redelivered (dead letter queued again).")
            count += 1
        self.message_user(request, f"{count} dead letter(s) queued for redelivery.", messages.SUCCESS)


@admin.register(DeadLetter)
class DeadLetterAdmin(DeliveryAdmin):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).filter(status=DeliveryStatus.DEAD)


@admin.register(PushConfig)
class PushConfigAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("config_id", "tenant", "run", "auth_scheme", "created_at", "credentials_wiped_at")
    list_filter = ("tenant",)
    search_fields = ("config_id", "run__run_id")
    list_select_related = ("tenant", "run")
    exclude = ("credentials_sealed", "url")


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("webhook_id", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("webhook_id",)
    list_select_related = ("tenant",)
    exclude = ("secret_sealed", "url")
