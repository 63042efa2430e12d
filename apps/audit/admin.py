"""Auditors browse host events in the admin; nobody adds, changes or deletes them (append-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.audit.models import HostEvent


@admin.register(HostEvent)
class HostEventAdmin(admin.ModelAdmin):
    list_display = ("at", "tenant", "subject_id", "sequence", "type", "durable", "event_id")
    list_filter = ("durable", "type", "tenant")
    search_fields = ("event_id", "subject_id", "type", "tenant__slug")
    list_select_related = ("tenant",)
    ordering = ("-at", "-pk")
    date_hierarchy = "at"
    fields = ("tenant", "subject_id", "subject", "sequence", "event_id", "type", "durable", "at", "payload")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # with the view permission the detail page renders read-only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
