"""Operators manage tenants and API keys. Keys are minted by the service and shown once."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_create, api_key_revoke


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at",)

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> tuple[str, ...]:
        # The slug is the first segment of every id the tenant owns: fixed once created.
        return ("slug", "created_at") if obj else ("created_at",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "tenant", "kind", "label", "created_at", "revoked_at")
    list_filter = ("kind", "tenant")
    search_fields = ("prefix", "label", "tenant__slug")
    list_select_related = ("tenant",)
    fields = ("tenant", "kind", "label", "prefix", "subject_id", "created_at", "revoked_at")
    readonly_fields = ("prefix", "subject_id", "created_at", "revoked_at")
    actions = ("revoke_keys",)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("prefix", "subject_id", "created_at", "revoked_at")
        return ("tenant", "kind", "prefix", "subject_id", "created_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["label"])
            return
        created, raw = api_key_create(tenant=obj.tenant, kind=obj.kind, label=obj.label)
        obj.pk = created.pk
        obj.prefix, obj.subject_id = created.prefix, created.subject_id
        obj.secret_digest = created.secret_digest
        messages.warning(request, f"New API key (shown once, copy it now): {raw}")

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke, never delete: the Subject id stays resolvable for audit

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for api_key in queryset:
            if api_key.revoked_at is None:
                api_key_revoke(api_key=api_key)
                self.log_change(request, api_key, "Revoked.")
                count += 1
        self.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)
