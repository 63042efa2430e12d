"""Operators author MCP prompts in the admin: malformed arguments or messages are refused on the
field with a clear error, a good prompt is saved (and served), and the changelist filters by tenant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.agents.models import Prompt, Workflow
from apps.agents.selectors import prompt_get_readable, prompt_messages_render
from apps.agents.services import agent_create, agent_publish, prompt_create, workflow_fixtures_seed
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from apps.tenants.subject import Subject

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/agents/prompt/add/"
GOOD_MESSAGES = [{"role": "user", "content": {"type": "text", "text": "Summarise {{topic}} briefly."}}]
GOOD_ARGUMENTS = [{"name": "topic", "description": "What to summarise", "required": True, "values": ["runs"]}]


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


@pytest.fixture
def acme() -> Tenant:
    tenant = tenant_get_or_create(slug="acme")[0]
    workflow_fixtures_seed(tenant=tenant)  # hooks run on commit; `db` never commits
    return tenant


def _form(tenant: Tenant, **overrides: Any) -> dict[str, str]:
    form = {
        "tenant": str(tenant.pk),
        "name": "summarise",
        "title": "Summarise",
        "description": "Summarises a topic.",
        "arguments": json.dumps(GOOD_ARGUMENTS),
        "messages": json.dumps(GOOD_MESSAGES),
        "workflow": "",
        "agent": "",
    }
    form.update(overrides)
    return form


def _errors(response: Any) -> dict[str, list[str]]:
    form = response.context["adminform"].form
    return {field: [str(e) for e in errors] for field, errors in form.errors.items()}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("messages", [{"role": "system", "content": {"type": "text", "text": "x"}}], 'role must be "user"'),
        ("messages", [{"role": "user", "content": {"type": "video", "url": "x"}}], 'type must be "text"'),
        ("messages", [{"role": "user", "content": {"type": "text", "text": "{{nope}}"}}], "not a declared argument"),
        (
            "messages",
            [{"role": "user", "content": {"type": "image", "data": "***", "mimeType": "image/png"}}],
            "must be non-empty base64",
        ),
        ("messages", [], "non-empty JSON list"),
        ("arguments", [{"name": "topic", "required": "yes"}], "required must be true or false"),
        ("arguments", [{"name": "topic"}, {"name": "topic"}], "declared twice"),
        ("arguments", {"topic": {}}, "must be a JSON list"),
    ],
)
def test_admin_refuses_a_malformed_prompt(
    operator_client: Client, acme: Tenant, field: str, value: Any, says: str
) -> None:
    response = operator_client.post(ADD_URL, _form(acme, **{field: json.dumps(value)}))
    assert response.status_code == 200  # the form again, with the error on the field
    errors = _errors(response)
    assert says in " ".join(errors.get(field, [])), errors
    assert not Prompt.objects.for_tenant(acme).filter(name="summarise").exists()


def test_admin_refuses_a_workflow_of_another_tenant(operator_client: Client, acme: Tenant) -> None:
    globex = tenant_get_or_create(slug="globex")[0]
    workflow_fixtures_seed(tenant=globex)
    foreign = Workflow.objects.for_tenant(globex).first()
    assert foreign is not None
    response = operator_client.post(ADD_URL, _form(acme, workflow=str(foreign.pk)))
    assert "another tenant" in " ".join(_errors(response)["workflow"])


def test_admin_saves_a_good_prompt_and_edits_it(operator_client: Client, acme: Tenant) -> None:
    agent = agent_create(tenant=acme, actor="t", agent_id="helper", persona="Hal", roster=[])
    response = operator_client.post(ADD_URL, _form(acme, agent=str(agent.pk)))
    assert response.status_code == 302, _errors(response)
    prompt = Prompt.objects.for_tenant(acme).get(name="summarise")
    assert prompt.agent == agent and prompt.arguments == GOOD_ARGUMENTS and prompt.messages == GOOD_MESSAGES

    reader = Subject(issuer="t", subject_id="t", tenant="acme", kind="user")
    agent_publish(agent=agent, actor="t")  # a prompt of an unpublished agent is served to nobody
    served = prompt_get_readable(subject=reader, name="summarise")
    assert prompt_messages_render(prompt=served, values={"topic": "runs"})[0]["content"]["text"] == (
        "Summarise runs briefly."
    )

    change_url = f"/admin/agents/prompt/{prompt.pk}/change/"
    edit = {k: v for k, v in _form(acme, agent=str(agent.pk), title="Summary").items() if k not in ("tenant", "name")}
    bad = operator_client.post(change_url, {**edit, "messages": json.dumps([{"role": "user"}])})
    assert "exactly role and content" in " ".join(_errors(bad)["messages"])
    assert operator_client.post(change_url, edit).status_code == 302
    prompt.refresh_from_db()
    assert prompt.title == "Summary" and prompt.messages == GOOD_MESSAGES


def test_changelist_searches_and_filters_by_tenant(operator_client: Client, acme: Tenant) -> None:
    globex = tenant_get_or_create(slug="globex")[0]
    prompt_create(tenant=globex, name="globex-notes", messages=GOOD_MESSAGES, arguments=GOOD_ARGUMENTS)
    page = operator_client.get("/admin/agents/prompt/", {"tenant__id__exact": str(globex.pk)}).content.decode()
    assert "globex-notes" in page and "test_simple_prompt" not in page
    found = operator_client.get("/admin/agents/prompt/", {"q": "simple"}).content.decode()
    assert "test_simple_prompt" in found and "globex-notes" not in found
