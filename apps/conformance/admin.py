"""Operators see every apply and clear of the conformance profile: evidence, never edited."""

from __future__ import annotations

from django.contrib import admin

from apps.conformance.models import ProfileChange
from apps.core.admin_read_only import ReadOnlyAdminMixin


@admin.register(ProfileChange)
class ProfileChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("at", "action", "tenant", "tenant_b", "pinned_before", "actor")
    list_filter = ("action",)
    readonly_fields = ("at", "action", "tenant", "tenant_b", "pinned_before", "details", "actor")
