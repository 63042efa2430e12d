"""Operators browse workflows (definitions change through `workflow_create` / fixture seeding)
and manage the agent inventory through audited services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from apps.agents.models import Agent, AgentChange, Prompt, Workflow
from apps.agents.services import (
    AGENT_EDITABLE_FIELDS,
    PROMPT_EDITABLE_FIELDS,
    agent_create,
    agent_publish,
    agent_unpublish,
    agent_update,
    prompt_create,
    prompt_definition_check,
    prompt_owner_check,
    prompt_update,
)
from apps.core.actors import admin_actor
from apps.core.admin_choices import TenantLabelledChoicesAdminMixin
from apps.core.admin_diff import ChangeDiffAdminMixin
from apps.core.admin_messages import NamedMessagesAdminMixin, action_confirmation, named
from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.core.errors import ValidationFailed


def agent_label(agent: Agent) -> str:
    """An agent as the admin names it: its agentId and its tenant ("demo-assistant (demo)"), as
    two tenants may each have an agent of the same id."""
    return f"{agent.agent_id} ({agent.tenant.slug})"


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only; never deleted, as runs keep a PROTECT reference to their workflow."""

    list_display = ("workflow_id", "tenant", "name", "updated_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
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


class AgentAdminBase(NamedMessagesAdminMixin, ServiceWritesAdminMixin, admin.ModelAdmin):
    """Operators edit an agent's descriptive fields; publishing goes through the audited actions
    only (STYLE.md habit 15), and agents are unpublished, never deleted (their audit rows stay).
    The page also shows the agent's A2A card as served, which apps/a2a builds: its admin registers
    this page with that field (apps/a2a/admin.py `AgentAdmin`)."""

    list_display = ("agent_id", "tenant", "persona", "pack_version", "published", "updated_at")
    list_filter = ("published", "tenant")
    search_fields = ("agent_id", "persona", "label", "tenant__slug")
    list_select_related = ("tenant",)
    readonly_fields = ("published", "created_at", "updated_at")
    actions = ("publish_agents", "unpublish_agents")

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is None else ("tenant", "agent_id", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        if change:
            agent_update(
                agent=obj,
                actor=admin_actor(request.user.get_username()),
                changes={field: getattr(obj, field) for field in form.changed_data if field in AGENT_EDITABLE_FIELDS},
            )
            return
        created = agent_create(
            tenant=obj.tenant,
            actor=admin_actor(request.user.get_username()),
            agent_id=obj.agent_id,
            **{field: getattr(obj, field) for field in AGENT_EDITABLE_FIELDS},
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Agent | None = None) -> bool:
        return False

    def object_label(self, obj: Agent) -> str:
        return agent_label(obj)

    def _change_each(
        self, request: HttpRequest, queryset: QuerySet[Agent], change: Callable[..., Agent], verb: str, done: str,
        consequence: str,
    ) -> HttpResponse | None:  # fmt: skip
        """After the confirmation page (what publishing changes is served at once), `change`
        each agent through its audited service and name them in the message."""
        agents = list(queryset.select_related("tenant"))
        labels = [agent_label(agent) for agent in agents]
        question = f"{verb} {named(labels)}? {consequence}"
        page = action_confirmation(self, request, agents, labels=labels, verb=verb, question=question)
        if page is not None:
            return page
        for agent in agents:
            change(agent=agent, actor=admin_actor(request.user.get_username()))
        self.message_user(request, f"{done} {named(labels)}.", messages.SUCCESS)
        return None

    @admin.action(description="Publish selected agents")
    def publish_agents(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        return self._change_each(
            request, queryset, agent_publish, "Publish", "Published",
            "They appear in GET /agents and answer through their a2aTenant at once.",
        )  # fmt: skip

    @admin.action(description="Unpublish selected agents")
    def unpublish_agents(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        return self._change_each(
            request, queryset, agent_unpublish, "Unpublish", "Unpublished",
            "They disappear everywhere at once: their a2aTenant answers as one never minted.",
        )  # fmt: skip


@admin.register(AgentChange)
class AgentChangeAdmin(ChangeDiffAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The audit trail of agents: read-only (append-only table)."""

    list_display = ("at", "tenant", "agent", "action", "actor", "changed_fields")
    list_filter = ("action", "tenant")
    search_fields = ("actor", "agent__agent_id", "tenant__slug")
    list_select_related = ("tenant", "agent")
    fields = readonly_fields = ("tenant", "agent", "actor", "action", "at", "difference")


@admin.register(Prompt)
class PromptAdmin(TenantLabelledChoicesAdminMixin, NamedMessagesAdminMixin, ServiceWritesAdminMixin, admin.ModelAdmin):
    """Operators author a tenant's MCP prompts. A malformed `arguments` or `messages` is refused on
    the field by `instance_check` (the services' own check); saves go through the services."""

    list_display = ("name", "tenant", "title", "workflow", "agent", "updated_at")
    list_filter = ("tenant",)
    search_fields = ("name", "title", "description", "tenant__slug")
    list_select_related = ("tenant", "workflow", "agent")
    readonly_fields = ("created_at", "updated_at")

    def object_label(self, obj: Prompt) -> str:
        return f"prompt {obj.name} ({obj.tenant.slug})"

    def get_readonly_fields(self, request: HttpRequest, obj: Prompt | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is None else ("tenant", "name", *self.readonly_fields)

    def instance_check(self, instance: Prompt) -> None:
        """The services' own checks, as errors on the offending field."""
        try:
            prompt_definition_check(arguments=instance.arguments, messages=instance.messages)
            if instance.tenant_id is not None:
                prompt_owner_check(tenant_id=instance.tenant_id, workflow=instance.workflow, agent=instance.agent)
        except ValidationFailed as exc:
            field = (exc.details or {}).get("field")
            raise ValidationError({field: exc.message} if field else exc.message) from exc

    def save_model(self, request: HttpRequest, obj: Prompt, form: Any, change: bool) -> None:
        if change:
            prompt_update(
                prompt=obj,
                changes={field: getattr(obj, field) for field in form.changed_data if field in PROMPT_EDITABLE_FIELDS},
            )
            return
        created = prompt_create(
            tenant=obj.tenant, name=obj.name, **{field: getattr(obj, field) for field in PROMPT_EDITABLE_FIELDS}
        )
        obj.pk = created.pk
