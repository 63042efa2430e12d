"""Auditors browse host events in the admin; nobody adds, changes or deletes them (append-only)."""

from __future__ import annotations

from django.contrib import admin

from apps.audit.models import HostEvent
from apps.core.admin_read_only import ReadOnlyAdminMixin


@admin.register(HostEvent)
class HostEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("at", "tenant", "subject_id", "sequence", "type", "durable", "event_id")
    list_filter = ("durable", "type", "tenant")
    search_fields = ("event_id", "subject_id", "type", "tenant__slug")
    list_select_related = ("tenant",)
    ordering = ("-at", "-pk")
    date_hierarchy = "at"
    # The chain digests (apps/audit/chain.py): the negotiation page links each record here.
    fields = (
        "tenant", "subject_id", "subject", "sequence", "event_id", "type", "durable", "at", "payload", "prev_digest",
        "digest",
    )  # fmt: skip
    readonly_fields = fields
