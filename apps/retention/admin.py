"""Retention in the admin: a tenant's windows and legal hold (saved through the audited services)
and the append-only trail of every change."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from apps.core.actors import admin_actor
from apps.core.admin_diff import ChangeDiffAdminMixin
from apps.core.errors import ValidationFailed
from apps.facets.admin import AppendOnlyAdmin, PolicyAdmin
from apps.retention.models import RetentionChange, RetentionPolicy
from apps.retention.services import host_retention, retention_clear, retention_of, retention_set


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(PolicyAdmin):
    """A tenant's overrides of the host's windows (empty: the host's) and its legal hold. Every
    save and delete goes through the services, audited in the same transaction (RetentionChange);
    deleting the row gives the tenant the host's windows again."""

    list_display = ("tenant", "runs_days", "records_days", "legal_hold", "in_force", "updated_at")
    list_filter = ("legal_hold",)
    search_fields = ("tenant__slug",)
    list_select_related = ("tenant",)
    fields = ("tenant", "runs_days", "records_days", "legal_hold", "in_force")
    readonly_fields = ("in_force",)

    def get_readonly_fields(self, request: HttpRequest, obj: RetentionPolicy | None = None) -> tuple[str, ...]:
        return ("tenant", "in_force") if obj is not None else ("in_force",)  # a policy's tenant never moves

    @admin.display(description="In force")
    def in_force(self, obj: RetentionPolicy | None) -> str:
        if obj is None or obj.tenant_id is None:
            host = host_retention()
            return f"host: runs {host.runs_days} days, records {host.records_days} days"
        retention = retention_of(obj.tenant_id)
        if retention.legal_hold:
            return "legal hold: nothing expires"
        return f"runs {retention.runs_days} days after they end, records {retention.records_days} days"

    def instance_check(self, instance: RetentionPolicy) -> None:
        taken = instance.pk is None and RetentionPolicy.objects.filter(tenant_id=instance.tenant_id).exists()
        if instance.tenant_id is not None and taken:
            raise ValidationError({"tenant": "This tenant has a policy already: change that one."})

    def save_model(self, request: HttpRequest, obj: RetentionPolicy, form: Any, change: bool) -> None:
        try:
            policy = retention_set(
                tenant=obj.tenant,
                actor=admin_actor(request.user.get_username()),
                runs_days=obj.runs_days,
                records_days=obj.records_days,
                legal_hold=obj.legal_hold,
            )
        except ValidationFailed as exc:  # the form's field checks ran the same rules; this is a race
            messages.error(request, exc.message)
            return
        obj.pk, obj.updated_at = policy.pk, policy.updated_at

    def delete_model(self, request: HttpRequest, obj: RetentionPolicy) -> None:
        retention_clear(tenant=obj.tenant, actor=admin_actor(request.user.get_username()))


@admin.register(RetentionChange)
class RetentionChangeAdmin(ChangeDiffAdminMixin, AppendOnlyAdmin):
    list_display = ("at", "tenant_slug", "actor", "changed_fields")
    search_fields = ("tenant_slug", "actor")
    date_hierarchy = "at"
    fields = readonly_fields = ("tenant_slug", "actor", "at", "difference")
