"""A tenant's workflows: small JSON definitions the run engine executes node by node."""

from __future__ import annotations

import re
from typing import Any

from django.core.validators import RegexValidator
from django.db import models

from apps.tenants.models import TenantOwnedModel

# ids.schema.json `workflowId` / `nodeId`: author-chosen ids.
AUTHOR_ID_PATTERN = r"^[A-Za-z0-9._~:-]{1,128}$"
AUTHOR_ID_RE = re.compile(AUTHOR_ID_PATTERN)


class TaskSupport(models.TextChoices):
    """How an MCP client may run the workflow as a tool (tools/list `execution.taskSupport`,
    SEP-2663): `required` refuses a client that did not declare the tasks extension (-32021);
    `optional` makes a call a task when the client declared the extension and the run outlasts
    the task grace (apps/mcp/tools.py)."""

    OPTIONAL = "optional", "optional"
    REQUIRED = "required", "required"


class Workflow(TenantOwnedModel):
    """One workflow definition of one tenant.

    `definition` is `{"nodes": [{"id", "kind", "config"}, ...]}`, executed in order; `input_schema`
    is the JSON Schema a run's inputs must satisfy before the run exists. Runs copy the definition
    when they start, so editing a workflow never changes a run already in flight.
    """

    workflow_id = models.CharField(
        max_length=128,
        validators=[RegexValidator(AUTHOR_ID_RE, "A workflowId is 1-128 of [A-Za-z0-9._~:-].")],
        help_text="The OpenWOP workflowId (author-chosen, unique within the tenant).",
    )
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    definition = models.JSONField(default=dict)
    input_schema = models.JSONField(default=dict)
    task_support = models.CharField(
        max_length=16,
        choices=TaskSupport.choices,
        default=TaskSupport.OPTIONAL,
        help_text="MCP: may a call become a task (optional), or must it (required).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["workflow_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "workflow_id"], name="workflow_id_unique_per_tenant"),
            models.CheckConstraint(
                condition=models.Q(workflow_id__regex=AUTHOR_ID_PATTERN), name="workflow_id_grammar"
            ),
        ]

    def __str__(self) -> str:
        return self.workflow_id


class Agent(TenantOwnedModel):
    """One entry of a tenant's agent inventory (`GET /agents`, RFC 0072 §A; interop.md §Per-agent
    cards).

    `roster` lists the workflowIds the agent runs, default first; only those the tenant really has
    are routed (and become skills of the agent's A2A card). Operators publish and unpublish through
    the admin actions, which call `agent_publish` / `agent_unpublish` (audited in `AgentChange`);
    an unpublished agent is invisible everywhere, including through its `a2aTenant`.
    """

    agent_id = models.CharField(
        max_length=128,
        validators=[RegexValidator(AUTHOR_ID_RE, "An agentId is 1-128 of [A-Za-z0-9._~:-].")],
        help_text="The OpenWOP agentId (author-chosen, unique within the tenant).",
    )
    persona = models.CharField(max_length=200, help_text="The agent card's name.")
    label = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    pack_version = models.CharField(max_length=64, default="1.0.0", help_text="The agent card's version.")
    pack_name = models.CharField(
        max_length=128, blank=True, db_default="", default="", help_text="The agent pack it was installed from."
    )
    # The pack's private material (SR-1: the system-prompt body and the resolved handoff schemas):
    # kept for the agent, never served. The inventory says only whether handoff schemas exist.
    system_prompt = models.TextField(blank=True, db_default="", default="", help_text="Never leaves the host.")
    handoff_schemas = models.JSONField(
        null=True, blank=True, default=None, help_text="{taskSchema, returnSchema}; never leaves the host."
    )
    roster = models.JSONField(default=list, blank=True, help_text="Routed workflowIds, default first.")
    published = models.BooleanField(default=False, editable=False, help_text="Changed by the publish actions only.")
    degraded = models.JSONField(default=list, blank=True, help_text="Capability tiers this host does not satisfy.")
    memory_degraded = models.BooleanField(default=False)
    # NULL, not "": a row the previous release inserts (it knows no such column) must be valid, and
    # "not stored yet" must differ from any stored value (routing_values.py).
    a2a_tenant = models.CharField(  # noqa: DJ001
        max_length=32, null=True, blank=True, editable=False,
        help_text="The stored a2aTenant routing value (routing_values.py); empty: not stored yet.",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["agent_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_id"], name="agent_id_unique_per_tenant"),
            models.CheckConstraint(condition=models.Q(agent_id__regex=AUTHOR_ID_PATTERN), name="agent_id_grammar"),
        ]

    def __str__(self) -> str:
        return self.agent_id


class AgentChangeAction(models.TextChoices):
    CREATE = "create", "create"
    UPDATE = "update", "update"
    PUBLISH = "publish", "publish"
    UNPUBLISH = "unpublish", "unpublish"


class AgentChangeRefused(RuntimeError):
    """An attempt to edit or delete an audit row (STYLE.md habit 6: audit tables are append-only)."""


class AgentChange(TenantOwnedModel):
    """One audited change of an agent: who, what, the state before and after. Append-only."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    actor = models.CharField(max_length=200, help_text="Who: the operator's username, or the system.")
    action = models.CharField(max_length=16, choices=AgentChangeAction.choices)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.agent_id} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AgentChangeRefused("agent changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AgentChangeRefused("agent changes are append-only")


# Prompt argument names and the `{{argName}}` placeholders that name them in message templates.
PROMPT_ARGUMENT_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
PROMPT_ARGUMENT_NAME_RE = re.compile(PROMPT_ARGUMENT_NAME_PATTERN)
PROMPT_PLACEHOLDER_RE = re.compile(r"\{\{([A-Za-z0-9_.-]{1,64})\}\}")


class Prompt(TenantOwnedModel):
    """One MCP prompt of one tenant (`prompts/list`, `prompts/get`, `completion/complete`).

    `arguments` is `[{"name", "description"?, "title"?, "required"?, "values"?}]`; `values` lists
    the completions offered for the argument and never leaves the host otherwise. `messages` is
    `[{"role": "user"|"assistant", "content": <text | image | resource content block>}]`; text
    (and an embedded resource's uri and text) may hold `{{argName}}` placeholders, filled with the
    caller's value as plain text (apps/agents/services.py `prompt_render`). Both are checked by
    `prompt_definition_check` before any row is written, and by the admin form (PromptAdmin.instance_check).
    """

    name = models.CharField(
        max_length=128,
        validators=[RegexValidator(AUTHOR_ID_RE, "A prompt name is 1-128 of [A-Za-z0-9._~:-].")],
        help_text="The MCP prompt name (author-chosen, unique within the tenant).",
    )
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    arguments = models.JSONField(
        default=list, blank=True, help_text='[{"name", "description"?, "required"?, "values"?: [completions]}]'
    )
    messages = models.JSONField(
        default=list, help_text='[{"role": "user"|"assistant", "content": {"type": "text", "text": "… {{arg}} …"}}]'
    )
    workflow = models.ForeignKey(
        Workflow,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="prompts",
        help_text="The workflow the prompt is declared on (same tenant), if any.",
    )
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="prompts",
        help_text="The agent the prompt is declared on (same tenant), if any.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="prompt_name_unique_per_tenant"),
            models.CheckConstraint(condition=models.Q(name__regex=AUTHOR_ID_PATTERN), name="prompt_name_grammar"),
        ]

    def __str__(self) -> str:
        return self.name
