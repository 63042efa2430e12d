"""A tenant's workflows: small JSON definitions the run engine executes node by node."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from django.db import models

from apps.tenants.models import TenantOwnedModel

# ids.schema.json `workflowId` / `nodeId`: author-chosen ids.
AUTHOR_ID_PATTERN = r"^[A-Za-z0-9._~:-]{1,128}$"
AUTHOR_ID_RE = re.compile(AUTHOR_ID_PATTERN)


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
