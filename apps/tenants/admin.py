"""Operators manage tenants and API keys. Keys are minted by the service and shown once, on the new
key's page, handed over sealed in the session (apps/tenants/key_handover.py), never in a cookie."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IS_POPUP_VAR
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from apps.core.admin_messages import named
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.core.errors import RateLimited
from apps.tenants.budgets import BUDGET_NAMES, DEFAULT_SETTINGS, api_keys_admit, budget_default
from apps.tenants.key_handover import new_key_hold, new_key_take
from apps.tenants.models import ApiKey, Tenant, TenantBudget
from apps.tenants.services import api_key_create, api_key_revoke


class TenantBudgetForm(forms.ModelForm):
    """Each field's help text names the host default an empty field falls back to."""

    class Meta:
        model = TenantBudget
        fields = BUDGET_NAMES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in BUDGET_NAMES:
            field = self.fields[name]
            default = budget_default(name)
            shown = "unlimited" if default == 0 else str(default)
            field.help_text = f"{field.help_text} Empty: the host default, {shown} ({DEFAULT_SETTINGS[name]})."


class TenantBudgetInline(admin.StackedInline):
    """The tenant's budgets (apps/tenants/budgets.py); a save holds on the next request in every
    process (the table's invalidation trigger)."""

    model = TenantBudget
    form = TenantBudgetForm
    can_delete = True
    max_num = 1
    extra = 1
    verbose_name_plural = "budgets (empty: the host default; 0: unlimited)"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at",)
    inlines = (TenantBudgetInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> tuple[str, ...]:
        # The slug is the first segment of every id the tenant owns: fixed once created.
        return ("slug", "created_at") if obj else ("created_at",)


@admin.register(ApiKey)
class ApiKeyAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    list_display = ("prefix", "tenant", "kind", "label", "created_at", "revoked_at")
    list_filter = ("kind", "tenant")
    search_fields = ("prefix", "label", "tenant__slug")
    list_select_related = ("tenant",)
    fields = ("tenant", "kind", "label", "prefix", "subject_id", "created_at", "revoked_at")
    readonly_fields = ("prefix", "subject_id", "created_at", "revoked_at")
    actions = ("revoke_keys",)

    def instance_check(self, instance: ApiKey) -> None:
        """A new key past the tenant's api_keys budget is a form error, not a failed save."""
        if instance.pk is None and instance.tenant_id is not None:
            try:
                api_keys_admit(tenant=instance.tenant)
            except RateLimited as exc:
                raise ValidationError(exc.message) from None

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is None else ("tenant", "kind", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["label"])
            return
        created, raw = api_key_create(tenant=obj.tenant, kind=obj.kind, label=obj.label)  # budget: the form's clean
        obj.pk = created.pk
        obj.prefix, obj.subject_id = created.prefix, created.subject_id
        obj.secret_digest = created.secret_digest
        new_key_hold(request, raw)

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        if IS_POPUP_VAR in request.POST:
            return super().response_add(request, obj, post_url_continue)
        # Whichever save button: the new key's page, where the raw key is shown once.
        self.message_user(request, f"Key {obj.prefix} created. Copy it now: it is not shown again.", messages.SUCCESS)
        page = reverse("admin:tenants_apikey_change", args=[obj.pk], current_app=self.admin_site.name)
        return HttpResponseRedirect(page)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ApiKey | None = None,
    ) -> HttpResponse:
        if obj is not None and request.method == "GET":  # admin pages are never cached (never_cache)
            context["new_key"] = new_key_take(request, prefix=obj.prefix)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke, never delete: the Subject id stays resolvable for audit

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = []
        for api_key in queryset.select_related("tenant"):
            if api_key.revoked_at is None:
                api_key_revoke(api_key=api_key)
                self.log_change(request, api_key, "Revoked.")
                revoked.append(f"{api_key.prefix} ({api_key.tenant.slug})")
        if revoked:
            self.message_user(request, f"Revoked key {named(revoked)}.", messages.SUCCESS)
        else:
            self.message_user(request, "No key revoked: the selected keys were revoked already.", messages.WARNING)
