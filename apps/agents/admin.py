"""Operators browse workflows; definitions change through `workflow_create` / fixture seeding."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.agents.models import Workflow


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ("workflow_id", "tenant", "name", "updated_at")
    list_filter = ("tenant",)
    search_fields = ("workflow_id", "name", "tenant__slug")
    readonly_fields = (
        "tenant",
        "workflow_id",
        "name",
        "description",
        "definition",
        "input_schema",
        "created_at",
        "updated_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False  # runs keep a PROTECT reference to their workflow
