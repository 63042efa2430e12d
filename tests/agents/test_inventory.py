"""The agent inventory: `GET /agents`, `GET /agents/{agentId}`, the routing value R, the audited
publish / unpublish services and admin actions, and the demo agent seed (interop.md §Per-agent
cards; RFC 0202)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from io import StringIO

import httpx
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from apps.agents.models import Agent, AgentChange, AgentChangeAction, AgentChangeRefused
from apps.agents.routing_values import A2A_TENANT_PURPOSE, LEGACY_HOST_VERSION, a2a_tenant_of
from apps.agents.services import (
    DEMO_AGENT_ID,
    agent_create,
    agent_demo_seed,
    agent_publish,
    agent_unpublish,
    agent_update,
    workflow_fixtures_seed,
)
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.envelope import assert_envelope

pytestmark = pytest.mark.django_db

R_SHAPE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")  # path-segment-safe, no `~`, 1-128 characters


@dataclass
class Tenancy:
    slug: str
    key: str
    tenant: Tenant

    def get(self, path: str) -> object:
        return Client().get(path, headers={"Authorization": f"Bearer {self.key}"})


def _tenancy(make_key, slug: str) -> Tenancy:  # type: ignore[no-untyped-def]
    key = make_key(slug)
    tenant = Tenant.objects.get(slug=slug)
    workflow_fixtures_seed(tenant=tenant)  # tenant hooks run on commit only
    return Tenancy(slug=slug, key=key, tenant=tenant)


@pytest.fixture
def acme(make_key) -> Tenancy:  # type: ignore[no-untyped-def]
    t = _tenancy(make_key, "acme")
    agent_create(
        tenant=t.tenant,
        actor="test",
        agent_id="helper",
        persona="Acme Helper",
        label="Helper",
        description="Helps acme.",
        pack_version="2.1.0",
        roster=["conformance-noop", "conformance-approval"],
        published=True,
        degraded=["memory.semantic"],
        memory_degraded=True,
    )
    agent_create(tenant=t.tenant, actor="test", agent_id="draft", persona="Draft", roster=["conformance-noop"])
    agent_create(
        tenant=t.tenant,
        actor="test",
        agent_id="unrouted",
        persona="Unrouted",
        roster=["no-such-workflow"],
        published=True,
    )
    return t


@pytest.fixture
def globex(make_key) -> Tenancy:  # type: ignore[no-untyped-def]
    t = _tenancy(make_key, "globex")
    agent_create(
        tenant=t.tenant,
        actor="test",
        agent_id="helper",
        persona="Globex Helper",
        roster=["conformance-noop"],
        published=True,
    )
    agent_create(
        tenant=t.tenant,
        actor="test",
        agent_id="g-only",
        persona="Globex Only",
        roster=["conformance-noop"],
        published=True,
    )
    return t


def _agents(t: Tenancy) -> dict[str, dict]:  # type: ignore[type-arg]
    response = t.get("/agents")
    assert response.status_code == 200, response.content  # type: ignore[attr-defined]
    return {entry["agentId"]: entry for entry in response.json()["agents"]}  # type: ignore[attr-defined]


def test_list_is_the_callers_published_inventory(acme: Tenancy, globex: Tenancy) -> None:
    mine = _agents(acme)
    assert set(mine) == {"helper", "unrouted"}  # "draft" is unpublished; globex's are not ours
    helper = mine["helper"]
    assert helper["persona"] == "Acme Helper" and helper["label"] == "Helper"
    assert helper["description"] == "Helps acme." and helper["packVersion"] == "2.1.0"
    assert helper["roster"] == [{"workflows": ["conformance-noop", "conformance-approval"]}]
    assert helper["degraded"] == ["memory.semantic"] and helper["memoryDegraded"] is True
    assert R_SHAPE.match(helper["a2aTenant"])
    # No routed workflow, no routing value.
    assert "a2aTenant" not in mine["unrouted"] and mine["unrouted"]["roster"] == [{"workflows": []}]
    # SR-1: nothing but the inventory projection.
    assert not {"systemPrompt", "handoffSchemas", "tenant", "tenantId"} & set(helper)
    assert set(_agents(globex)) == {"helper", "g-only"}


def test_detail_and_the_one_not_found(acme: Tenancy, globex: Tenancy) -> None:
    response = acme.get("/agents/helper")
    assert response.status_code == 200  # type: ignore[attr-defined]
    assert response.json() == _agents(acme)["helper"]  # type: ignore[attr-defined]

    def not_found(t: Tenancy, agent_id: str) -> dict:  # type: ignore[type-arg]
        body = assert_envelope(t.get(f"/agents/{agent_id}"), "not_found", 404)
        return json.loads(json.dumps(body).replace(agent_id, "<id>"))

    # Unpublished, another tenant's and never-existing agents: one path, the same body.
    never = not_found(acme, "never-anywhere")
    assert not_found(acme, "draft") == never
    assert not_found(acme, "g-only") == never
    assert not_found(globex, "draft") == never


def test_unauthenticated_is_refused(acme: Tenancy) -> None:
    assert_envelope(Client().get("/agents"), "unauthenticated", 401)
    assert_envelope(Client().get("/agents/helper"), "unauthenticated", 401)


def test_routing_value_is_stored_random_unique_opaque_and_stable_across_keys_and_versions(  # type: ignore[no-untyped-def]
    acme: Tenancy, globex: Tenancy, settings
) -> None:
    first = _agents(acme)["helper"]["a2aTenant"]
    assert _agents(acme)["helper"]["a2aTenant"] == first  # stable across calls
    agent = Agent.objects.for_tenant(acme.tenant).get(agent_id="helper")
    # Minted when the agent was created and kept: not derived from the key or the host version.
    assert agent.a2a_tenant == first == a2a_tenant_of(agent=agent)
    key = hashlib.sha256((A2A_TENANT_PURPOSE + django_settings.SECRET_KEY).encode()).digest()
    derived = hmac.new(key, f"{agent.pk}:{LEGACY_HOST_VERSION}".encode(), hashlib.sha256).digest()
    assert first != base64.urlsafe_b64encode(derived).decode().rstrip("=")[:32]

    minted = [e["a2aTenant"] for t in (acme, globex) for e in _agents(t).values() if "a2aTenant" in e]
    assert len(minted) == len(set(minted)) == 3  # acme helper, globex helper, globex g-only
    subject = subject_from_api_key(acme.key)
    for value in minted:
        assert R_SHAPE.match(value) and len(value) == 32 and "~" not in value
        for disclosed in ("acme", "globex", subject.subject_id, "helper", "g-only"):
            assert disclosed not in value

    # Peers hold it: a new host version or a new secret key moves nothing.
    settings.SPECTACULAR_SETTINGS = {**settings.SPECTACULAR_SETTINGS, "VERSION": "9.9.9"}
    settings.SECRET_KEY = "another-secret-key-" + "y" * 40
    assert _agents(acme)["helper"]["a2aTenant"] == first


def test_a_routing_value_from_before_it_was_stored_is_kept_then_stored_by_reseal(  # type: ignore[no-untyped-def]
    acme: Tenancy, settings
) -> None:
    """An agent of an earlier release has no stored R: it keeps the one that release derived (so
    its peers' cards still route, and that release's processes route what this one publishes
    during a rolling upgrade), whatever this release's version; `reseal` stores it, after which
    the secret key may change."""
    agent = Agent.objects.for_tenant(acme.tenant).get(agent_id="helper")
    Agent.unscoped_all_tenants.filter(pk=agent.pk).update(a2a_tenant=None)  # as the migration leaves it
    # What an earlier release computes: HMAC(K, "<pk>:<its version>"), its version being 0.1.0.
    key = hashlib.sha256((A2A_TENANT_PURPOSE + django_settings.SECRET_KEY).encode()).digest()
    mac = hmac.new(key, f"{agent.pk}:0.1.0".encode(), hashlib.sha256).digest()
    earlier = base64.urlsafe_b64encode(mac).decode().rstrip("=")[:32]
    assert _agents(acme)["helper"]["a2aTenant"] == earlier
    settings.SPECTACULAR_SETTINGS = {**settings.SPECTACULAR_SETTINGS, "VERSION": "9.9.9"}
    assert _agents(acme)["helper"]["a2aTenant"] == earlier  # a version change moves nothing

    out = StringIO()
    call_command("reseal", stdout=out)
    assert "agent.a2a-tenant: 1 stored" in out.getvalue()
    agent.refresh_from_db()
    assert agent.a2a_tenant == earlier
    call_command("reseal", stdout=(again := StringIO()))
    assert "agent.a2a-tenant: 0 stored" in again.getvalue()  # idempotent
    settings.SECRET_KEY = "another-secret-key-" + "y" * 40
    assert _agents(acme)["helper"]["a2aTenant"] == earlier  # stored: the key may change now


def test_publish_and_unpublish_are_audited(acme: Tenancy) -> None:
    agent = Agent.objects.for_tenant(acme.tenant).get(agent_id="draft")
    agent_publish(agent=agent, actor="operator-1")
    assert "a2aTenant" in _agents(acme)["draft"]
    agent_publish(agent=agent, actor="operator-1")  # already published: no change, no row
    agent_unpublish(agent=agent, actor="operator-2")
    assert "draft" not in _agents(acme)

    changes = list(AgentChange.objects.for_tenant(acme.tenant).filter(agent=agent).order_by("id"))
    assert [(c.action, c.actor) for c in changes] == [
        (AgentChangeAction.CREATE, "test"),
        (AgentChangeAction.PUBLISH, "operator-1"),
        (AgentChangeAction.UNPUBLISH, "operator-2"),
    ]
    assert changes[1].before["published"] is False and changes[1].after["published"] is True
    assert changes[2].before["published"] is True and changes[2].after["published"] is False
    with pytest.raises(AgentChangeRefused):
        changes[0].save()
    with pytest.raises(AgentChangeRefused):
        changes[0].delete()


def test_admin_actions_call_the_audited_services(acme: Tenancy) -> None:
    operator = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-ops-123")
    client = Client()
    client.force_login(operator)
    agent = Agent.objects.for_tenant(acme.tenant).get(agent_id="draft")
    for action, published in (("publish_agents", True), ("unpublish_agents", False)):
        response = client.post(
            "/admin/agents/agent/", {"action": action, "_selected_action": [agent.pk], "post": "yes"}, follow=True
        )  # confirmed (tests/admin/test_named_messages.py covers the confirmation page)
        assert response.status_code == 200
        agent.refresh_from_db()
        assert agent.published is published
    actors = list(AgentChange.objects.for_tenant(acme.tenant).filter(agent=agent).values_list("action", "actor"))
    assert ("publish", "admin:ops") in actors and ("unpublish", "admin:ops") in actors
    for page in ("/admin/agents/agent/add/", f"/admin/agents/agent/{agent.pk}/change/", "/admin/agents/agentchange/"):
        assert client.get(page).status_code == 200, page


def test_demo_agent_seed_is_idempotent(make_key) -> None:  # type: ignore[no-untyped-def]
    t = _tenancy(make_key, "initech")
    demo = agent_demo_seed(tenant=t.tenant)
    assert demo.published and demo.roster[0] == "echo"  # a first message answers (issue 53 item 6)
    assert agent_demo_seed(tenant=t.tenant).pk == demo.pk
    agent_unpublish(agent=demo, actor="operator")
    agent_demo_seed(tenant=t.tenant)  # an operator's unpublish stands
    assert Agent.objects.for_tenant(t.tenant).get(agent_id=DEMO_AGENT_ID).published is False
    assert Agent.objects.for_tenant(t.tenant).count() == 1
    assert AgentChange.objects.for_tenant(t.tenant).filter(action=AgentChangeAction.CREATE).count() == 1


def test_discovery_advertises_agents_with_manifest_runtime() -> None:
    document = json.loads(Client().get("/.well-known/openwop").content)
    assert document["agents"]["status"] == "stable"
    assert isinstance(document["agents"]["manifestRuntime"], dict)
    assert document["a2a"]["agentCards"] is True


def test_openwop_client_parses_the_inventory_live(live_url: str, live_env, make_key) -> None:  # type: ignore[no-untyped-def]
    """Black-box: a tenant created for real (hooks on commit seed the demo agent), read with the
    real openwop-client from a separate server process."""
    from openwop_client import OpenwopClient

    key = make_key("livetenant")
    tenant = Tenant.objects.get(slug="livetenant")
    client = OpenwopClient(live_url, key)
    entries = client.agents_list()
    assert entries is not None and [e.agentId for e in entries] == [DEMO_AGENT_ID]
    assert entries[0].persona and entries[0].packVersion and entries[0].label
    one = client.agents_get(DEMO_AGENT_ID)
    assert one is not None and one.agentId == DEMO_AGENT_ID
    assert client.agents_get("no-such-agent") is None
    # The live process has its own SECRET_KEY, and serves the stored value: the same in every
    # process, whatever its key, on every call.
    demo = Agent.objects.for_tenant(tenant).get(agent_id=DEMO_AGENT_ID)
    env, _ = live_env
    assert env["DJANGO_SECRET_KEY"] != django_settings.SECRET_KEY
    seen = {
        httpx.get(f"{live_url}/agents", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()["agents"][0][
            "a2aTenant"
        ]
        for _ in range(2)
    }
    assert demo.a2a_tenant and seen == {demo.a2a_tenant} == {a2a_tenant_of(agent=demo)}


def test_edits_are_audited(acme: Tenancy) -> None:
    agent = Agent.objects.for_tenant(acme.tenant).get(agent_id="helper")
    agent_update(agent=agent, actor="operator", changes={"label": "New label", "roster": ["conformance-approval"]})
    entry = _agents(acme)["helper"]
    assert entry["label"] == "New label" and entry["roster"] == [{"workflows": ["conformance-approval"]}]
    change = AgentChange.objects.for_tenant(acme.tenant).filter(agent=agent, action=AgentChangeAction.UPDATE).get()
    assert change.before["label"] == "Helper" and change.after["label"] == "New label"
    agent_update(agent=agent, actor="operator", changes={"label": "New label"})  # no change, no row
    assert AgentChange.objects.for_tenant(acme.tenant).filter(action=AgentChangeAction.UPDATE).count() == 1
    with pytest.raises(ValidationFailed):
        agent_update(agent=agent, actor="operator", changes={"published": True})
    with pytest.raises(ValidationFailed):
        agent_update(agent=agent, actor="operator", changes={"roster": ["bad id!"]})
