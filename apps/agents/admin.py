"""Operators browse workflows (definitions change through `workflow_create` / fixture seeding)
and manage the agent inventory through audited services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.agents.models import Agent, AgentChange, Workflow
from apps.agents.services import AGENT_EDITABLE_FIELDS, agent_create, agent_publish, agent_unpublish, agent_update
from apps.core.admin_read_only import ReadOnlyAdminMixin


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


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Operators edit an agent's descriptive fields; publishing goes through the audited actions
    only (STYLE.md habit 15), and agents are unpublished, never deleted (their audit rows stay)."""

    list_display = ("agent_id", "tenant", "persona", "pack_version", "published", "updated_at")
    list_filter = ("published", "tenant")
    search_fields = ("agent_id", "persona", "label", "tenant__slug")
    readonly_fields = ("published", "created_at", "updated_at")
    actions = ("publish_agents", "unpublish_agents")

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("published", "created_at", "updated_at")
        return ("tenant", "agent_id", "published", "created_at", "updated_at")

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        if change:
            agent_update(
                agent=obj,
                actor=request.user.get_username(),
                changes={field: getattr(obj, field) for field in form.changed_data if field in AGENT_EDITABLE_FIELDS},
            )
            return
        created = agent_create(
            tenant=obj.tenant,
            actor=request.user.get_username(),
            agent_id=obj.agent_id,
            persona=obj.persona,
            roster=obj.roster,
            label=obj.label,
            description=obj.description,
            pack_version=obj.pack_version,
            degraded=obj.degraded,
            memory_degraded=obj.memory_degraded,
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Agent | None = None) -> bool:
        return False

    @admin.action(description="Publish selected agents")
    def publish_agents(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            agent_publish(agent=agent, actor=request.user.get_username())
        self.message_user(request, f"Published {queryset.count()} agent(s).", messages.SUCCESS)

    @admin.action(description="Unpublish selected agents")
    def unpublish_agents(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            agent_unpublish(agent=agent, actor=request.user.get_username())
        self.message_user(request, f"Unpublished {queryset.count()} agent(s).", messages.SUCCESS)


@admin.register(AgentChange)
class AgentChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The audit trail of agents: read-only (append-only table)."""

    list_display = ("at", "tenant", "agent", "action", "actor")
    list_filter = ("action", "tenant")
    search_fields = ("actor", "agent__agent_id", "tenant__slug")
    readonly_fields = ("tenant", "agent", "actor", "action", "before", "after", "at")
