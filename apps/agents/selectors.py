"""Reads for workflows, always inside the caller's tenant."""

from __future__ import annotations

from apps.agents.models import Workflow
from apps.core.errors import NotFound
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject


def workflow_get(*, tenant: Tenant | int, workflow_id: str) -> Workflow:
    """The tenant's workflow, or 404 not_found (another tenant's workflow is simply not there)."""
    workflow = Workflow.objects.for_tenant(tenant).filter(workflow_id=workflow_id).first()
    if workflow is None:
        raise NotFound(f"No workflow {workflow_id!r}.", details={"workflowId": workflow_id})
    return workflow


def workflow_get_readable(*, subject: Subject, workflow_id: str) -> Workflow:
    tenant = Tenant.objects.get(slug=subject.tenant)
    return workflow_get(tenant=tenant, workflow_id=workflow_id)
