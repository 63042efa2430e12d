"""Writes for workflows: authoring, and the fixture workflows each tenant is seeded with."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.agents.definitions import workflow_definition_check
from apps.agents.fixtures import FIXTURE_WORKFLOWS
from apps.agents.models import AUTHOR_ID_RE, Workflow
from apps.core.errors import Conflict, ValidationFailed
from apps.tenants.models import Tenant


def workflow_create(
    *,
    tenant: Tenant,
    workflow_id: str,
    definition: dict[str, Any],
    input_schema: dict[str, Any],
    name: str = "",
    description: str = "",
) -> Workflow:
    if not AUTHOR_ID_RE.match(workflow_id):
        raise ValidationFailed("A workflowId is 1-128 of [A-Za-z0-9._~:-].", details={"field": "workflowId"})
    workflow_definition_check(definition=definition, input_schema=input_schema)
    with transaction.atomic(durable=True):
        if Workflow.objects.for_tenant(tenant).filter(workflow_id=workflow_id).exists():
            raise Conflict("version_conflict", f"The workflow {workflow_id!r} already exists.", status=409)
        return Workflow.objects.create(
            tenant=tenant,
            workflow_id=workflow_id,
            name=name,
            description=description,
            definition=definition,
            input_schema=input_schema,
        )


def workflow_fixtures_seed(*, tenant: Tenant) -> list[Workflow]:
    """Create or refresh the fixture workflows of `tenant`. Idempotent: re-running changes nothing
    unless a fixture's definition changed in code.

    Not durable: tenant-creation hooks call it, and a caller may run those inside its own
    transaction (seed_demo, tests).
    """
    seeded: list[Workflow] = []
    with transaction.atomic():
        for workflow_id, fixture in FIXTURE_WORKFLOWS.items():
            workflow_definition_check(definition=fixture["definition"], input_schema=fixture["input_schema"])
            fields = {
                "name": fixture["name"],
                "description": fixture["description"],
                "definition": fixture["definition"],
                "input_schema": fixture["input_schema"],
            }
            workflow, created = Workflow.objects.for_tenant(tenant).get_or_create(
                workflow_id=workflow_id, defaults={"tenant": tenant, **fields}
            )
            if not created and any(getattr(workflow, k) != v for k, v in fields.items()):
                for key, value in fields.items():
                    setattr(workflow, key, value)
                workflow.save(update_fields=[*fields, "updated_at"])
            seeded.append(workflow)
    return seeded


def workflow_fixtures_seed_for_tenant_pk(tenant_pk: int) -> None:
    """The tenant-created hook (apps.tenants.hooks)."""
    workflow_fixtures_seed(tenant=Tenant.objects.get(pk=tenant_pk))
