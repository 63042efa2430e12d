"""Admin choices say whose they are and offer what is known (issue 53 item 5): agents carry their
tenant, version fields are selects of the facet's offered versions, and the card-keys list shows a
key's thumbprint and a summary of the served card, not the card."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.a2a.services import card_key_generate
from apps.a2a.signing import public_jwk_of
from apps.agents.services import agent_create
from apps.facets.services import facet_ensure, facet_update, version_policy_set
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db

OLD, NEW = "2025-11-25", "2026-07-28"


@pytest.fixture
def operator_client(client: Client) -> Client:
    facet_ensure(protocol="a2a")
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD], "minimum_version": OLD}, actor="test")
    client.force_login(User.objects.create_superuser("opal", "opal@example.test", "pw"))
    return client


def _options(page: str, name: str) -> list[str]:
    """The labels of the options of the select `name` on `page`."""
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S)
    assert select is not None, f"no select {name}"
    return [html.unescape(label) for label in re.findall(r"<option[^>]*>([^<]*)</option>", select[1])]


def test_agent_choices_carry_their_tenant(operator_client: Client) -> None:
    for slug in ("demo", "acme"):
        tenant = tenant_get_or_create(slug=slug)[0]
        agent_create(tenant=tenant, actor="test", agent_id="demo-assistant", persona="Hal", roster=[])
    for url in ("/admin/facets/versionpolicy/add/", "/admin/agents/prompt/add/"):
        agents = _options(operator_client.get(url).content.decode(), "agent")
        assert "demo-assistant (demo)" in agents and "demo-assistant (acme)" in agents, url
        assert "demo-assistant" not in agents  # never the bare id twice


def test_policy_floors_are_selects_of_the_offered_versions(operator_client: Client) -> None:
    page = operator_client.get("/admin/facets/versionpolicy/add/").content.decode()
    floors = _options(page, "minimum_version")
    assert floors[0] == "(none)" and {"1.0", NEW, OLD} <= set(floors)
    assert '<optgroup label="MCP">' in page  # grouped by protocol until the policy has one
    tenant = tenant_get_or_create(slug="acme")[0]
    policy = version_policy_set(tenant=tenant, agent=None, protocol="mcp", minimum=NEW, actor="test")
    page = operator_client.get(f"/admin/facets/versionpolicy/{policy.pk}/change/").content.decode()
    assert _options(page, "minimum_version") == ["(none)", NEW, OLD]  # the policy's protocol only
    assert _options(page, "scheduled_minimum_version") == ["(none)", NEW, OLD]
    assert re.search(rf'<option value="{NEW}" selected>', page)
    # The rules still judge the value: a floor looser than the host's is refused on the field.
    refused = operator_client.post(
        f"/admin/facets/versionpolicy/{policy.pk}/change/",
        {"minimum_version": "2025-06-18", "scheduled_minimum_version": "", "scheduled_at_0": "", "scheduled_at_1": ""},
    )
    assert refused.status_code == 200 and "looser than the host floor" in refused.content.decode()


def test_facet_versions_offer_the_offered_versions(operator_client: Client) -> None:
    page = operator_client.get("/admin/facets/facet/mcp/change/").content.decode()
    assert _options(page, "schedule_minimum") == ["(none)", NEW, OLD]
    # The preferred version and the floor suggest the offered versions (a datalist) and still take
    # a version the same save offers: the services judge it.
    for name in ("preferred_version", "minimum_version"):
        assert re.search(rf'<input type="text" name="{name}"[^>]* list="id_{name}_offered"', page), name
        offered = re.search(rf'<datalist id="id_{name}_offered">(.*?)</datalist>', page)
        assert offered is not None and re.findall(r'<option value="([^"]+)">', offered[1]) == [NEW, OLD]


def test_the_card_keys_list_shows_thumbprints_not_the_card(operator_client: Client) -> None:
    key = card_key_generate(algorithm="EdDSA", actor="test")
    jwk = public_jwk_of(key)
    members = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]}, separators=(",", ":"))
    thumbprint = base64.urlsafe_b64encode(hashlib.sha256(members.encode()).digest()).rstrip(b"=").decode()
    page = operator_client.get("/admin/a2a/cardsigningkey/").content.decode()
    assert f'<code title="{thumbprint}">{thumbprint[:16]}…</code>' in page  # RFC 7638
    assert key.kid in page and '"supportedInterfaces"' not in page and "protectedHeaders" not in page
    digest = re.search(r'<code id="served-card-digest" title="([0-9a-f]{64})">', page)
    assert digest is not None
    assert '<a href="/.well-known/agent-card.json" id="served-card-link">' in page
