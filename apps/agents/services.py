"""Writes for workflows (authoring, the fixture workflows each tenant is seeded with) and for the
agent inventory (create, publish, unpublish; each audited by an `AgentChange` row written in the
same transaction as the change)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from apps.agents.definitions import workflow_definition_check
from apps.agents.fixtures import FIXTURE_WORKFLOWS
from apps.agents.models import AUTHOR_ID_RE, Agent, AgentChange, AgentChangeAction, TaskSupport, Workflow
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
                "task_support": fixture.get("task_support", TaskSupport.OPTIONAL),
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


# ---------------------------------------------------------------------------------------------
# The agent inventory

SYSTEM_ACTOR = "system"
DEMO_AGENT_ID = "demo-assistant"
DEMO_AGENT: dict[str, Any] = {
    "persona": "Demo Assistant",
    "label": "Demo assistant",
    "description": "A demonstration agent: approvals by default, and the no-op fixture.",
    "pack_version": "1.0.0",
    "roster": ["conformance-approval", "conformance-noop"],
}


def _agent_state(agent: Agent) -> dict[str, Any]:
    """What an audit row records of an agent (no secrets: an agent holds none)."""
    return {
        "agentId": agent.agent_id,
        "persona": agent.persona,
        "label": agent.label,
        "description": agent.description,
        "packVersion": agent.pack_version,
        "roster": list(agent.roster),
        "published": agent.published,
        "degraded": list(agent.degraded),
        "memoryDegraded": agent.memory_degraded,
    }


def _agent_audit(*, agent: Agent, actor: str, action: str, before: dict[str, Any] | None) -> None:
    AgentChange.objects.create(
        tenant_id=agent.tenant_id, agent=agent, actor=actor, action=action, before=before, after=_agent_state(agent)
    )


def _roster_check(roster: Any) -> list[str]:
    if not isinstance(roster, list) or not all(isinstance(w, str) and AUTHOR_ID_RE.match(w) for w in roster):
        raise ValidationFailed("roster is a list of workflowIds.", details={"field": "roster"})
    return list(dict.fromkeys(roster))


def agent_create(
    *,
    tenant: Tenant,
    actor: str,
    agent_id: str,
    persona: str,
    roster: list[str],
    label: str = "",
    description: str = "",
    pack_version: str = "1.0.0",
    published: bool = False,
    degraded: list[str] | None = None,
    memory_degraded: bool = False,
) -> Agent:
    """Create an inventory entry (audited). Not durable, so seeding can run inside a caller's
    transaction; the row and its audit row commit together either way."""
    if not AUTHOR_ID_RE.match(agent_id):
        raise ValidationFailed("An agentId is 1-128 of [A-Za-z0-9._~:-].", details={"field": "agentId"})
    with transaction.atomic():
        if Agent.objects.for_tenant(tenant).filter(agent_id=agent_id).exists():
            raise Conflict("version_conflict", f"The agent {agent_id!r} already exists.", status=409)
        agent = Agent.objects.create(
            tenant=tenant,
            agent_id=agent_id,
            persona=persona,
            label=label,
            description=description,
            pack_version=pack_version,
            roster=_roster_check(roster),
            published=published,
            degraded=list(degraded or []),
            memory_degraded=memory_degraded,
        )
        _agent_audit(agent=agent, actor=actor, action=AgentChangeAction.CREATE, before=None)
    return agent


AGENT_EDITABLE_FIELDS = ("persona", "label", "description", "pack_version", "roster", "degraded", "memory_degraded")


def agent_update(*, agent: Agent, actor: str, changes: dict[str, Any]) -> Agent:
    """An operator's edit of an agent's descriptive fields (not its id, tenant or publication),
    audited with the state before and after."""
    unknown = set(changes) - set(AGENT_EDITABLE_FIELDS)
    if unknown:
        raise ValidationFailed(f"Not editable agent fields: {', '.join(sorted(unknown))}.")
    if "roster" in changes:
        changes = {**changes, "roster": _roster_check(changes["roster"])}
    with transaction.atomic(durable=True):
        locked = Agent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=agent.pk)
        before = _agent_state(locked)
        for field, value in changes.items():
            setattr(locked, field, value)
        if _agent_state(locked) == before:
            return locked
        locked.save(update_fields=[*changes, "updated_at"])
        _agent_audit(agent=locked, actor=actor, action=AgentChangeAction.UPDATE, before=before)
    return locked


def _agent_set_published(*, agent: Agent, actor: str, published: bool) -> Agent:
    with transaction.atomic(durable=True):
        locked = Agent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=agent.pk)
        if locked.published == published:
            return locked  # already so: no change, no audit row
        before = _agent_state(locked)
        locked.published = published
        locked.save(update_fields=["published", "updated_at"])
        action = AgentChangeAction.PUBLISH if published else AgentChangeAction.UNPUBLISH
        _agent_audit(agent=locked, actor=actor, action=action, before=before)
    return locked


def agent_publish(*, agent: Agent, actor: str) -> Agent:
    """Make the agent visible in `GET /agents` and reachable through its a2aTenant."""
    return _agent_set_published(agent=agent, actor=actor, published=True)


def agent_unpublish(*, agent: Agent, actor: str) -> Agent:
    """Hide the agent everywhere: its a2aTenant then answers as one never minted."""
    return _agent_set_published(agent=agent, actor=actor, published=False)


def agent_demo_seed(*, tenant: Tenant) -> Agent:
    """The demo agent every tenant starts with, published. Idempotent: an existing one is left
    exactly as operators left it (an unpublished demo agent stays unpublished)."""
    existing = Agent.objects.for_tenant(tenant).filter(agent_id=DEMO_AGENT_ID).first()
    if existing is not None:
        return existing
    try:
        return agent_create(
            tenant=tenant, actor=SYSTEM_ACTOR, agent_id=DEMO_AGENT_ID, published=True, **DEMO_AGENT
        )
    except (Conflict, IntegrityError):  # seeded concurrently
        return Agent.objects.for_tenant(tenant).get(agent_id=DEMO_AGENT_ID)


def agent_demo_seed_for_tenant_pk(tenant_pk: int) -> None:
    """The tenant-created hook (apps.tenants.hooks)."""
    agent_demo_seed(tenant=Tenant.objects.get(pk=tenant_pk))
