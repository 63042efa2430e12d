"""Admin messages name the object (issue 53 item 5), and publishing or unpublishing an agent asks
for confirmation first, as Django's delete action does."""

from __future__ import annotations

import html
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.agents.models import Agent, AgentChange
from apps.agents.services import agent_create, agent_publish
from apps.core.admin_messages import named
from apps.facets.services import facet_ensure
from apps.tenants.services import api_key_create, tenant_get_or_create

pytestmark = pytest.mark.django_db

AGENTS = "/admin/agents/agent/"


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("opal", "opal@example.test", "pw"))
    return client


def _agent(slug: str, agent_id: str, persona: str = "Hal") -> Agent:
    tenant = tenant_get_or_create(slug=slug)[0]
    return agent_create(tenant=tenant, actor="test", agent_id=agent_id, persona=persona, roster=[])


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(m) for m in response.context["messages"]]


def test_named_lists_objects_and_bounds_the_list() -> None:
    assert named(["a"]) == "a" and named(["a", "b"]) == "a and b" and named(["a", "b", "c"]) == "a, b and c"
    assert named([str(i) for i in range(12)]) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"


def test_publishing_asks_first_then_names_each_agent_with_its_tenant(operator_client: Client) -> None:
    demo, acme = _agent("demo", "demo-assistant"), _agent("acme", "demo-assistant")
    chosen = {"action": "publish_agents", "_selected_action": [str(demo.pk), str(acme.pk)]}
    asked = operator_client.post(AGENTS, chosen)
    assert asked.status_code == 200
    page = html.unescape(asked.content.decode())
    assert "Publish demo-assistant (acme) and demo-assistant (demo)?" in page or (
        "Publish demo-assistant (demo) and demo-assistant (acme)?" in page
    )
    assert 'name="post" value="yes"' in page and 'name="csrfmiddlewaretoken"' in page
    assert not Agent.unscoped_all_tenants.filter(published=True).exists()  # nothing changed before the answer
    assert not AgentChange.unscoped_all_tenants.filter(action="publish").exists()

    done = operator_client.post(AGENTS, {**chosen, "post": "yes"}, follow=True)
    assert Agent.unscoped_all_tenants.filter(published=True).count() == 2
    [message] = _messages(done)
    assert message.startswith("Published demo-assistant (") and "(demo)" in message and "(acme)" in message
    assert "agent(s)" not in message


def test_unpublishing_asks_first_and_says_whom(operator_client: Client) -> None:
    agent = _agent("demo", "demo-assistant")
    agent_publish(agent=agent, actor="test")
    chosen = {"action": "unpublish_agents", "_selected_action": [str(agent.pk)]}
    asked = operator_client.post(AGENTS, chosen)
    assert "Unpublish demo-assistant (demo)?" in html.unescape(asked.content.decode())
    assert Agent.unscoped_all_tenants.get(pk=agent.pk).published
    done = operator_client.post(AGENTS, {**chosen, "post": "yes"}, follow=True)
    assert _messages(done) == ["Unpublished demo-assistant (demo)."]
    assert not Agent.unscoped_all_tenants.get(pk=agent.pk).published


def test_the_confirmed_action_needs_the_csrf_token(operator_client: Client) -> None:
    tenant = tenant_get_or_create(slug="demo")[0]
    agent = agent_create(tenant=tenant, actor="test", agent_id="a.b", persona="<b>bold</b>", roster=[])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="opal"))
    refused = strict.post(AGENTS, {"action": "publish_agents", "_selected_action": [str(agent.pk)], "post": "yes"})
    assert refused.status_code == 403 and not Agent.unscoped_all_tenants.get(pk=agent.pk).published


def test_a_save_names_the_object_and_what_changed(operator_client: Client) -> None:
    agent = _agent("demo", "demo-assistant")
    url = f"{AGENTS}{agent.pk}/change/"
    form = operator_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["persona"] = "Helpful <Hal>"
    saved = operator_client.post(url, data, follow=True)
    [message] = _messages(saved)
    assert message == "Changed demo-assistant (demo): Persona."
    assert "Helpful &lt;Hal&gt;" not in message and "changed successfully" not in saved.content.decode()

    facet_ensure(protocol="mcp")
    form = operator_client.get("/admin/facets/facet/mcp/change/").context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["mrtr_max_rounds"] = "6"
    assert isinstance(json.loads(data["versions"]), list)
    saved = operator_client.post("/admin/facets/facet/mcp/change/", data, follow=True)
    assert _messages(saved) == ["Changed mcp facet: Mrtr max rounds."]


def test_revoking_and_retiring_name_the_keys(operator_client: Client) -> None:
    key, _ = api_key_create(tenant=tenant_get_or_create(slug="acme")[0])
    done = operator_client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [str(key.pk)]}, follow=True
    )
    assert _messages(done) == [f"Revoked key {key.prefix} (acme)."]
    again = operator_client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [str(key.pk)]}, follow=True
    )
    assert "No key revoked" in _messages(again)[0]
