"""Reads for workflows and the agent inventory, always inside the caller's tenant."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from apps.agents.models import Agent, Workflow
from apps.agents.routing_values import A2A_TENANT_RE, a2a_tenant_of
from apps.core.errors import NotFound
from apps.core.invalidation import TOPIC_CARD, cached
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject


def workflow_get(*, tenant: Tenant | int, workflow_id: str) -> Workflow:
    """The tenant's workflow, or 404 not_found (another tenant's workflow is simply not there)."""
    workflow = Workflow.objects.for_tenant(tenant).filter(workflow_id=workflow_id).first()
    if workflow is None:
        raise NotFound(f"No workflow {workflow_id!r}.", details={"workflowId": workflow_id})
    return workflow


def workflow_list_readable(*, subject: Subject) -> list[Workflow]:
    """The caller's workflows, by id (what MCP lists as tools)."""
    tenant = Tenant.objects.get(slug=subject.tenant)
    return list(Workflow.objects.for_tenant(tenant).order_by("workflow_id"))


def workflow_get_readable(*, subject: Subject, workflow_id: str) -> Workflow:
    return workflow_get(tenant=subject_tenant_pk(subject), workflow_id=workflow_id)


def workflow_get_readable_cached(*, subject: Subject, workflow_id: str) -> Workflow:
    """`workflow_get_readable` from this process's cache (topic `card`: any write to a workflow
    empties it in every process, apps/core/invalidation.py), for the doors that start a run of it
    on every call (MCP tools/call). The row is shared: read it, never change it. An unknown
    workflow is never cached: NotFound is raised every time."""
    tenant_pk = subject_tenant_pk(subject)
    key = ("workflow", tenant_pk, workflow_id)
    return cached(TOPIC_CARD, key, lambda: workflow_get(tenant=tenant_pk, workflow_id=workflow_id))


# ---------------------------------------------------------------------------------------------
# The agent inventory (interop.md §Per-agent cards)


@dataclass(frozen=True, slots=True)
class InventoryEntry:
    """One published agent as the caller sees it: the workflows routed to it for this caller
    (its roster, default first, limited to workflows the caller's tenant has) and, when any is
    routed, its routing value R."""

    agent: Agent
    workflows: list[Workflow]
    a2a_tenant: str | None

    @property
    def default_workflow(self) -> Workflow | None:
        return self.workflows[0] if self.workflows else None


def _entry(agent: Agent, workflows_by_id: dict[str, Workflow]) -> InventoryEntry:
    roster = [w for w in agent.roster if isinstance(w, str)] if isinstance(agent.roster, list) else []
    routed = [workflows_by_id[w] for w in dict.fromkeys(roster) if w in workflows_by_id]
    return InventoryEntry(
        agent=agent, workflows=routed, a2a_tenant=a2a_tenant_of(agent_pk=agent.pk) if routed else None
    )


def agent_inventory(*, subject: Subject) -> list[InventoryEntry]:
    """`GET /agents`: the published agents of the caller's tenant, nothing else."""
    tenant = Tenant.objects.filter(slug=subject.tenant).first()
    if tenant is None:
        return []
    agents = list(Agent.objects.for_tenant(tenant).filter(published=True).order_by("agent_id"))
    wanted = {w for agent in agents if isinstance(agent.roster, list) for w in agent.roster if isinstance(w, str)}
    workflows = {w.workflow_id: w for w in Workflow.objects.for_tenant(tenant).filter(workflow_id__in=wanted)}
    return [_entry(agent, workflows) for agent in agents]


def agent_get_readable(*, subject: Subject, agent_id: str) -> InventoryEntry:
    """`GET /agents/{agentId}`: one published agent of the caller's tenant, or 404 not_found for
    every other id (unknown, unpublished, another tenant's: one path, same bytes)."""
    for entry in agent_inventory(subject=subject):
        if entry.agent.agent_id == agent_id:
            return entry
    raise NotFound(f"No agent {agent_id!r}.", details={"agentId": agent_id})


def agent_by_a2a_tenant(*, subject: Subject, a2a_tenant: str) -> InventoryEntry | None:
    """The caller's inventory entry whose R this is, or None: an R of another tenant, of an
    unpublished or unrouted agent, a malformed or a never-minted one all give None. R is
    recomputed over the caller's own inventory only, so it can never select a tenant."""
    if not A2A_TENANT_RE.match(a2a_tenant):
        return None
    found = None
    for entry in agent_inventory(subject=subject):
        # Compare every entry in constant time: the answer's timing says nothing about which matched.
        if entry.a2a_tenant is not None and hmac.compare_digest(entry.a2a_tenant, a2a_tenant):
            found = entry
    return found
