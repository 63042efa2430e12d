"""Operators edit the host's A2A skill routing; the A2A message records are read-only evidence."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.a2a.models import SkillRoute, TaskMessage


@admin.register(SkillRoute)
class SkillRouteAdmin(admin.ModelAdmin):
    list_display = ("workflow_id", "name", "is_default", "enabled", "position", "updated_at")
    list_editable = ("enabled", "position")
    list_filter = ("enabled", "is_default")
    search_fields = ("workflow_id", "name")
    readonly_fields = ("updated_at",)


@admin.register(TaskMessage)
class TaskMessageAdmin(admin.ModelAdmin):
    list_display = ("message_id", "run", "tenant", "principal", "created_at")
    list_filter = ("tenant",)
    search_fields = ("message_id", "run__run_id")
    list_select_related = ("tenant", "run")
    readonly_fields = ("tenant", "run", "principal", "message_id", "document", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: TaskMessage | None = None) -> bool:
        return False
