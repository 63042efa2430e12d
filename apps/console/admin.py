"""Operators bind console users to tenants. Creating a membership goes through `membership_create`
(which creates the user when missing); the admin's LogEntry records who did it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from apps.console.models import SignInRefusal, TenantMembership
from apps.console.services import membership_create, membership_refusal
from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.tenants.models import Tenant


class MembershipAddForm(forms.ModelForm):
    username = forms.CharField(max_length=150, help_text="Created when missing; an existing user must not be staff.")
    password = forms.CharField(
        widget=forms.PasswordInput, required=False, help_text="Required for a new user; replaces an existing one's."
    )

    class Meta:
        model = TenantMembership
        fields = ("tenant",)

    def clean(self) -> dict[str, Any]:
        super().clean()  # ModelForm.clean() returns cleaned_data; the stubs allow None
        data = self.cleaned_data
        refusal = membership_refusal(username=data.get("username", ""), password=data.get("password") or None)
        if refusal:
            raise forms.ValidationError(refusal)
        return data


@admin.register(TenantMembership)
class TenantMembershipAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    list_display = ("user", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("user__username", "tenant__slug")
    list_select_related = ("user", "tenant")
    readonly_fields = ("user", "tenant", "created_at")

    def get_form(
        self, request: HttpRequest, obj: TenantMembership | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm]:
        if obj is None:
            kwargs["form"] = MembershipAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: TenantMembership | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj else ()

    def get_fields(self, request: HttpRequest, obj: TenantMembership | None = None) -> tuple[str, ...]:
        return ("user", "tenant", "created_at") if obj else ("tenant", "username", "password")

    def has_change_permission(self, request: HttpRequest, obj: TenantMembership | None = None) -> bool:
        return False if obj else super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: TenantMembership, form: Any, change: bool) -> None:
        tenant: Tenant = form.cleaned_data["tenant"]
        created = membership_create(  # the form's clean() ran the same refusal checks
            tenant=tenant, username=form.cleaned_data["username"], password=form.cleaned_data["password"] or None
        )
        obj.pk, obj.user_id, obj.tenant_id = created.pk, created.user_id, created.tenant_id


@admin.register(SignInRefusal)
class SignInRefusalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Sign-ins the throttle refused, staff and console (append-only audit rows)."""

    list_display = ("at", "door", "username", "address")
    list_filter = ("door",)
    search_fields = ("username", "address")
    date_hierarchy = "at"
