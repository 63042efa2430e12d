"""Operators see which peer credentials tenants registered, never the secret (STYLE.md habit 16).
Read-only: tenants create and delete their own through the REST surface."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.peers.models import PeerCredential


@admin.register(PeerCredential)
class PeerCredentialAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("credential_id", "tenant", "origin", "scheme", "label", "created_at")
    list_filter = ("tenant",)
    search_fields = ("credential_id", "origin", "label")
    fields = ("credential_id", "tenant", "origin", "scheme", "label", "created_at")
    readonly_fields = fields
    list_select_related = ("tenant",)
