"""Writes for workflows (authoring, the fixture workflows each tenant is seeded with) and for the
agent inventory (create, publish, unpublish; each audited by an `AgentChange` row written in the
same transaction as the change)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.db import IntegrityError, transaction

from apps.agents.definitions import workflow_definition_check
from apps.agents.fixture_prompts import FIXTURE_PROMPTS
from apps.agents.fixtures import FIXTURE_WORKFLOWS
from apps.agents.models import (
    AUTHOR_ID_RE,
    PROMPT_ARGUMENT_NAME_RE,
    PROMPT_PLACEHOLDER_RE,
    Agent,
    AgentChange,
    AgentChangeAction,
    Prompt,
    TaskSupport,
    Workflow,
)
from apps.agents.routing_values import a2a_tenant_legacy, a2a_tenant_mint
from apps.core.actors import system_actor
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
    for fixture in FIXTURE_WORKFLOWS.values():
        workflow_definition_check(definition=fixture["definition"], input_schema=fixture["input_schema"])
    fixtures = {
        workflow_id: {"task_support": TaskSupport.OPTIONAL, **fixture}
        for workflow_id, fixture in FIXTURE_WORKFLOWS.items()
    }
    seeded = _fixtures_refresh(Workflow, tenant, "workflow_id", fixtures)
    prompt_fixtures_seed(tenant=tenant)
    return seeded


def _fixtures_refresh(model: Any, tenant: Tenant, key: str, fixtures: dict[str, dict[str, Any]]) -> list[Any]:
    """One row per fixture (`key` names it), created, or refreshed when its fields changed in code."""
    seeded = []
    with transaction.atomic():
        for name, fields in fixtures.items():
            row, created = model.objects.for_tenant(tenant).get_or_create(
                **{key: name}, defaults={"tenant": tenant, **fields}
            )
            if not created and any(getattr(row, k) != v for k, v in fields.items()):
                for field, value in fields.items():
                    setattr(row, field, value)
                row.save(update_fields=[*fields, "updated_at"])
            seeded.append(row)
    return seeded


# ---------------------------------------------------------------------------------------------
# The agent inventory

SEED_ACTOR = system_actor("demo-seed")  # the demo agent every new tenant starts with
DEMO_AGENT_ID = "demo-assistant"
DEMO_AGENT: dict[str, Any] = {
    "persona": "Demo Assistant",
    "label": "Demo assistant",
    "description": "A demonstration agent: echo by default, an approval gate, and the no-op fixture.",
    "pack_version": "1.0.0",
    # The first routed workflow is what a message naming no skill runs: echo answers at once.
    "roster": ["echo", "conformance-approval", "conformance-noop"],
}


def _agent_state(agent: Agent) -> dict[str, Any]:
    """What an audit row records of an agent (no secrets: an agent holds none)."""
    return {
        "agentId": agent.agent_id,
        "persona": agent.persona,
        "label": agent.label,
        "description": agent.description,
        "packVersion": agent.pack_version,
        "packName": agent.pack_name,
        "hasHandoffSchemas": bool(agent.handoff_schemas),  # the schemas themselves stay private (SR-1)
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
    pack_name: str = "",
    system_prompt: str = "",
    handoff_schemas: dict[str, Any] | None = None,
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
            pack_name=pack_name,
            system_prompt=system_prompt,
            handoff_schemas=handoff_schemas,
            a2a_tenant=a2a_tenant_mint(),
        )
        _agent_audit(agent=agent, actor=actor, action=AgentChangeAction.CREATE, before=None)
    return agent


def a2a_tenants_pending() -> int:
    """Agents whose routing value is not stored yet (still derived from SECRET_KEY on each read)."""
    return Agent.unscoped_all_tenants.filter(a2a_tenant__isnull=True).count()


def a2a_tenants_store(batch: int) -> int:
    """Store the routing value of up to `batch` agents that have none stored, as earlier releases
    derived it under the current SECRET_KEY (the value their peers hold), so it survives the key's
    next change. One short transaction; a row being edited is left for the next batch. Returns how
    many were stored."""
    with transaction.atomic():
        rows = list(
            Agent.unscoped_all_tenants.filter(a2a_tenant__isnull=True)
            .select_for_update(skip_locked=True)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch]
        )
        for pk in rows:
            # No `updated_at` change: the agent as its tenant sees it did not change.
            Agent.unscoped_all_tenants.filter(pk=pk, a2a_tenant__isnull=True).update(
                a2a_tenant=a2a_tenant_legacy(agent_pk=pk)
            )
    return len(rows)


AGENT_EDITABLE_FIELDS = (
    "persona",
    "label",
    "description",
    "pack_version",
    "roster",
    "degraded",
    "memory_degraded",
    "pack_name",
    "system_prompt",
    "handoff_schemas",
)


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
        private_before = (locked.system_prompt, locked.handoff_schemas)  # not in the audit row (SR-1)
        for field, value in changes.items():
            setattr(locked, field, value)
        if _agent_state(locked) == before and (locked.system_prompt, locked.handoff_schemas) == private_before:
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
        return agent_create(tenant=tenant, actor=SEED_ACTOR, agent_id=DEMO_AGENT_ID, published=True, **DEMO_AGENT)
    except (Conflict, IntegrityError):  # seeded concurrently
        return Agent.objects.for_tenant(tenant).get(agent_id=DEMO_AGENT_ID)


# ---------------------------------------------------------------------------------------------
# Prompts (MCP prompts/list, prompts/get, completion/complete)

PROMPT_ROLES = ("user", "assistant")
PROMPT_ARGUMENT_KEYS = frozenset({"name", "title", "description", "required", "values"})
PROMPT_VALUES_MAX = 1000
_CONTENT_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "annotations", "_meta"}),
    "image": frozenset({"type", "data", "mimeType", "annotations", "_meta"}),
    "resource": frozenset({"type", "resource", "annotations", "_meta"}),
}
_RESOURCE_KEYS = frozenset({"uri", "mimeType", "text", "blob", "_meta"})


def _prompt_refusal(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, details={"field": field})


def _base64_check(value: Any, where: str) -> None:
    try:
        if not isinstance(value, str) or not value:
            raise ValueError
        base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise _prompt_refusal("messages", f"{where} must be non-empty base64.") from None


def _template_strings(content: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, template) for every string of a content block that may hold `{{argName}}`."""
    if content["type"] == "text":
        return [("text", content["text"])]
    if content["type"] == "resource":
        resource = content["resource"]
        return [(f"resource.{key}", resource[key]) for key in ("uri", "text") if key in resource]
    return []


def _prompt_arguments_check(arguments: Any) -> list[str]:
    if not isinstance(arguments, list):
        raise _prompt_refusal("arguments", "arguments must be a JSON list of objects.")
    names: list[str] = []
    for index, argument in enumerate(arguments):
        where = f"arguments[{index}]"
        if not isinstance(argument, dict):
            raise _prompt_refusal("arguments", f"{where} must be an object.")
        unknown = set(argument) - PROMPT_ARGUMENT_KEYS
        if unknown:
            raise _prompt_refusal("arguments", f"{where} has unknown keys: {', '.join(sorted(unknown))}.")
        name = argument.get("name")
        if not isinstance(name, str) or not PROMPT_ARGUMENT_NAME_RE.match(name):
            raise _prompt_refusal("arguments", f"{where}.name must be 1-64 of [A-Za-z0-9_.-].")
        if name in names:
            raise _prompt_refusal("arguments", f"{where}.name {name!r} is declared twice.")
        names.append(name)
        for key in ("title", "description"):
            if key in argument and not isinstance(argument[key], str):
                raise _prompt_refusal("arguments", f"{where}.{key} must be a string.")
        if "required" in argument and not isinstance(argument["required"], bool):
            raise _prompt_refusal("arguments", f"{where}.required must be true or false.")
        values = argument.get("values", [])
        if (
            not isinstance(values, list)
            or len(values) > PROMPT_VALUES_MAX
            or not all(isinstance(v, str) for v in values)
        ):
            raise _prompt_refusal("arguments", f"{where}.values must be a list of at most {PROMPT_VALUES_MAX} strings.")
    return names


def _prompt_content_check(content: Any, where: str) -> None:
    kind = content.get("type") if isinstance(content, dict) else None
    if kind not in _CONTENT_KEYS:
        raise _prompt_refusal("messages", f'{where}.type must be "text", "image" or "resource".')
    unknown = set(content) - _CONTENT_KEYS[kind]
    if unknown:
        raise _prompt_refusal("messages", f"{where} has unknown keys: {', '.join(sorted(unknown))}.")
    if kind == "text" and not isinstance(content.get("text"), str):
        raise _prompt_refusal("messages", f"{where}.text must be a string.")
    if kind == "image":
        _base64_check(content.get("data"), f"{where}.data")
        mime = content.get("mimeType")
        if not isinstance(mime, str) or not mime.startswith("image/"):
            raise _prompt_refusal("messages", f'{where}.mimeType must be an "image/..." type.')
    if kind == "resource":
        resource = content.get("resource")
        if not isinstance(resource, dict) or set(resource) - _RESOURCE_KEYS:
            raise _prompt_refusal("messages", f"{where}.resource must be an object of uri, mimeType?, text | blob.")
        if not isinstance(resource.get("uri"), str) or not resource["uri"]:
            raise _prompt_refusal("messages", f"{where}.resource.uri must be a non-empty string.")
        if ("text" in resource) == ("blob" in resource):
            raise _prompt_refusal("messages", f"{where}.resource needs exactly one of text or blob.")
        if "text" in resource and not isinstance(resource["text"], str):
            raise _prompt_refusal("messages", f"{where}.resource.text must be a string.")
        if "blob" in resource:
            _base64_check(resource["blob"], f"{where}.resource.blob")
        if "mimeType" in resource and not isinstance(resource["mimeType"], str):
            raise _prompt_refusal("messages", f"{where}.resource.mimeType must be a string.")


def prompt_definition_check(*, arguments: Any, messages: Any) -> None:
    """Refuse a malformed prompt before it is stored (ValidationFailed, `details.field` naming
    `arguments` or `messages`): argument declarations, content blocks MCP defines (text, image,
    embedded resource), and `{{placeholders}}` that each name a declared argument."""
    names = set(_prompt_arguments_check(arguments))
    if not isinstance(messages, list) or not messages:
        raise _prompt_refusal("messages", "messages must be a non-empty JSON list of {role, content} objects.")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise _prompt_refusal("messages", f"{where} must be an object with exactly role and content.")
        if message["role"] not in PROMPT_ROLES:
            raise _prompt_refusal("messages", f'{where}.role must be "user" or "assistant".')
        _prompt_content_check(message["content"], f"{where}.content")
        for field, template in _template_strings(message["content"]):
            for placeholder in PROMPT_PLACEHOLDER_RE.findall(template):
                if placeholder not in names:
                    raise _prompt_refusal(
                        "messages",
                        f"{where}.content.{field} uses {{{{{placeholder}}}}}, which is not a declared argument.",
                    )


def prompt_owner_check(*, tenant_id: int, workflow: Workflow | None, agent: Agent | None) -> None:
    """A prompt is declared on a workflow or agent of its own tenant only."""
    if workflow is not None and workflow.tenant_id != tenant_id:
        raise _prompt_refusal("workflow", "The workflow belongs to another tenant.")
    if agent is not None and agent.tenant_id != tenant_id:
        raise _prompt_refusal("agent", "The agent belongs to another tenant.")


def prompt_create(
    *,
    tenant: Tenant,
    name: str,
    messages: list[dict[str, Any]],
    arguments: list[dict[str, Any]] | None = None,
    title: str = "",
    description: str = "",
    workflow: Workflow | None = None,
    agent: Agent | None = None,
) -> Prompt:
    """Create a prompt. Not durable: the admin saves inside its own change-form transaction."""
    if not AUTHOR_ID_RE.match(name):
        raise _prompt_refusal("name", "A prompt name is 1-128 of [A-Za-z0-9._~:-].")
    arguments = list(arguments or [])
    prompt_definition_check(arguments=arguments, messages=messages)
    prompt_owner_check(tenant_id=tenant.pk, workflow=workflow, agent=agent)
    with transaction.atomic():
        if Prompt.objects.for_tenant(tenant).filter(name=name).exists():
            raise Conflict("version_conflict", f"The prompt {name!r} already exists.", status=409)
        return Prompt.objects.create(
            tenant=tenant,
            name=name,
            title=title,
            description=description,
            arguments=arguments,
            messages=messages,
            workflow=workflow,
            agent=agent,
        )


PROMPT_EDITABLE_FIELDS = ("title", "description", "arguments", "messages", "workflow", "agent")


def prompt_update(*, prompt: Prompt, changes: dict[str, Any]) -> Prompt:
    """Change a prompt's editable fields (not its tenant or name), checked as on create."""
    unknown = set(changes) - set(PROMPT_EDITABLE_FIELDS)
    if unknown:
        raise ValidationFailed(f"Not editable prompt fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        locked = Prompt.objects.for_tenant(prompt.tenant_id).select_for_update().get(pk=prompt.pk)
        for field, value in changes.items():
            setattr(locked, field, value)
        prompt_definition_check(arguments=locked.arguments, messages=locked.messages)
        prompt_owner_check(tenant_id=locked.tenant_id, workflow=locked.workflow, agent=locked.agent)
        if changes:
            locked.save(update_fields=[*changes, "updated_at"])
    return locked


def prompt_fixtures_seed(*, tenant: Tenant) -> list[Prompt]:
    """Create or refresh the fixture prompts of `tenant` (the MCP conformance suite asks for them
    by name). Idempotent, and not durable, like `workflow_fixtures_seed` that calls it."""
    for fixture in FIXTURE_PROMPTS.values():
        prompt_definition_check(arguments=fixture["arguments"], messages=fixture["messages"])
    return _fixtures_refresh(Prompt, tenant, "name", FIXTURE_PROMPTS)
