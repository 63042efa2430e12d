"""Reads for workflows and the agent inventory, always inside the caller's tenant."""

from __future__ import annotations

import copy
import hmac
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from apps.agents.models import PROMPT_PLACEHOLDER_RE, Agent, Prompt, Workflow
from apps.agents.routing_values import A2A_TENANT_RE, a2a_tenant_of
from apps.core.errors import NotFound, ValidationFailed
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


def _entry(agent: Agent, workflows_by_id: dict[str, Workflow]) -> InventoryEntry:
    roster = [w for w in agent.roster if isinstance(w, str)] if isinstance(agent.roster, list) else []
    routed = [workflows_by_id[w] for w in dict.fromkeys(roster) if w in workflows_by_id]
    return InventoryEntry(agent=agent, workflows=routed, a2a_tenant=a2a_tenant_of(agent=agent) if routed else None)


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


# ---------------------------------------------------------------------------------------------
# Prompts (MCP prompts/list, prompts/get, completion/complete)


UNKNOWN_PROMPT_MESSAGE = "Unknown prompt"


def _prompts_served(subject: Subject) -> QuerySet[Prompt]:
    """The caller's prompts, less those declared on an unpublished agent: such an agent is
    invisible everywhere (its prompts as much as its card)."""
    return Prompt.objects.for_tenant(subject_tenant_pk(subject)).exclude(agent__published=False)


def prompt_list_readable(*, subject: Subject, after: str | None, limit: int) -> list[Prompt]:
    """Up to `limit` of the caller's prompts by name, those named after `after` (keyset paging:
    a prompt added or removed between pages never shifts the next one)."""
    prompts = _prompts_served(subject).order_by("name")
    if after is not None:
        prompts = prompts.filter(name__gt=after)
    return list(prompts[:limit])


def prompt_get_readable(*, subject: Subject, name: str) -> Prompt:
    """The caller's prompt, or NotFound: unknown and another tenant's prompts are one path, with
    one message (interop.md §Isolation; the MCP door answers -32602 with the same bytes)."""
    prompt = _prompts_served(subject).filter(name=name).first()
    if prompt is None:
        raise NotFound(UNKNOWN_PROMPT_MESSAGE)  # never the name: the bytes must not vary by who asks
    return prompt


def prompt_arguments_read(*, prompt: Prompt, arguments: dict[str, Any]) -> dict[str, str]:
    """The caller's argument values, checked against the prompt's declarations: every name
    declared, every value a string, every required argument given (ValidationFailed otherwise)."""
    declared = {a["name"]: a for a in prompt.arguments}
    for name, value in arguments.items():
        if name not in declared:
            raise ValidationFailed(f"Unknown argument {name!r} for prompt {prompt.name!r}.", details={"argument": name})
        if not isinstance(value, str):
            raise ValidationFailed(f"Argument {name!r} must be a string.", details={"argument": name})
    for name, argument in declared.items():
        if argument.get("required") and name not in arguments:
            raise ValidationFailed(f"Missing required argument {name!r}.", details={"argument": name})
    return dict(arguments)


def _fill(template: str, values: dict[str, str]) -> str:
    # One pass: a value is inserted as plain text and never rescanned, so `{{7*7}}`, `{{other}}`
    # or `{% if %}` inside a value come back verbatim. An optional argument left out is empty.
    return PROMPT_PLACEHOLDER_RE.sub(lambda match: values.get(match.group(1), ""), template)


def prompt_messages_render(*, prompt: Prompt, values: dict[str, str]) -> list[dict[str, Any]]:
    """The prompt's messages with `{{argName}}` filled in text, and in an embedded resource's
    uri and text; images are passed through untouched."""
    rendered: list[dict[str, Any]] = []
    for message in prompt.messages:
        content = copy.deepcopy(message["content"])
        if content.get("type") == "text":
            content["text"] = _fill(content["text"], values)
        elif content.get("type") == "resource":
            resource = content["resource"]
            for key in ("uri", "text"):
                if isinstance(resource.get(key), str):
                    resource[key] = _fill(resource[key], values)
        rendered.append({"role": message["role"], "content": content})
    return rendered


def prompt_argument_values(*, prompt: Prompt, argument: str) -> list[str] | None:
    """The completion values declared for one argument of the prompt; None if it has no such
    argument."""
    for declared in prompt.arguments:
        if declared.get("name") == argument:
            return list(declared.get("values") or [])
    return None
