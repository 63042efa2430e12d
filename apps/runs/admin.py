"""Operators inspect runs and their logs. Read-only: a run changes only through the run services,
so every change is an event in its log (STYLE.md habit 15)."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.runs.models import Interrupt, Run, RunEvent


class RunEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = RunEvent
    fields = ("sequence", "type", "node_id", "at", "payload")
    readonly_fields = fields
    ordering = ("sequence",)
    extra = 0


class InterruptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Interrupt
    fields = ("interrupt_id", "node_id", "kind", "created_at", "resolved_at", "resolution")
    readonly_fields = fields
    extra = 0


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("run_id", "tenant", "workflow", "status", "transport", "created_at", "completed_at")
    list_filter = ("status", "transport", "tenant")
    search_fields = ("run_id", "context_id", "tenant__slug")
    list_select_related = ("tenant", "workflow")
    inlines = (InterruptInline, RunEventInline)
    exclude = ("definition",)
