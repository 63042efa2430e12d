"""Change records in the admin show a field-by-field difference (issue 53 item 5): one row per field
that changed (field, before, after), never the two JSON documents, every value escaped."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.agents.models import AgentChange
from apps.agents.services import agent_create, agent_update
from apps.core.admin_diff import ABSENT, diff_table, field_changes
from apps.facets.models import FacetChange
from apps.facets.services import facet_ensure, facet_update
from apps.retention.models import RetentionChange
from apps.retention.services import retention_set
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db

OLD, NEW = "2025-11-25", "2026-07-28"


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("opal", "opal@example.test", "pw"))
    return client


def _diff_rows(page: str) -> dict[str, tuple[str, str]]:
    """{field: (before, after)} as the record page's difference table shows them (still escaped)."""
    rows = re.findall(
        r'<tr class="change-diff-row" data-field="([^"]*)"><th scope="row">[^<]*</th><td>(.*?)</td><td>(.*?)</td></tr>',
        page,
    )
    return {field: (before, after) for field, before, after in rows}


def test_field_changes_lists_only_what_differs_in_record_order() -> None:
    before = {"a": 1, "b": [1, 2], "c": "x"}
    after = {"a": 1, "b": [1, 3], "c": "y", "d": None}
    assert field_changes(before, after) == [("b", [1, 2], [1, 3]), ("c", "x", "y"), ("d", ABSENT, None)]
    assert field_changes(None, {"a": 1}) == [("a", ABSENT, 1)]  # a creation: every field is new
    assert field_changes({"a": 1}, {"a": 1}) == []
    assert "No field changed." in diff_table({"a": 1}, {"a": 1})


def test_a_facet_change_shows_each_changed_field_not_the_documents(operator_client: Client) -> None:
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD], "mrtr_max_rounds": 6}, actor="admin:opal")
    change = FacetChange.objects.filter(actor="admin:opal").get()
    page = operator_client.get(f"/admin/facets/facetchange/{change.pk}/change/").content.decode()
    rows = _diff_rows(page)
    assert rows == {"versions": (f"[&quot;{NEW}&quot;]", f"[&quot;{NEW}&quot;, &quot;{OLD}&quot;]"),
                    "mrtr_max_rounds": ("4", "6")}  # fmt: skip
    assert "preferred_version" not in rows  # unchanged fields are not listed
    assert '"server_paths"' not in page and "&quot;server_paths&quot;" not in page  # no JSON document
    listing = operator_client.get("/admin/facets/facetchange/").content.decode()
    assert "versions, mrtr_max_rounds" in listing  # the changelist names what changed


def test_caller_strings_in_a_record_are_escaped(operator_client: Client) -> None:
    tenant = tenant_get_or_create(slug="acme")[0]
    agent = agent_create(tenant=tenant, actor="admin:opal", agent_id="helper", persona="Hal", roster=[])
    agent_update(agent=agent, actor="admin:opal", changes={"persona": '<script>alert("x")</script>'})
    change = AgentChange.objects.for_tenant(tenant).filter(action="update").get()
    page = operator_client.get(f"/admin/agents/agentchange/{change.pk}/change/").content.decode()
    assert '<script>alert("x")</script>' not in page
    assert _diff_rows(page)["persona"] == ("Hal", "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;")


def test_a_creation_shows_every_field_as_new(operator_client: Client) -> None:
    tenant = tenant_get_or_create(slug="acme")[0]
    retention_set(tenant=tenant, runs_days=5, records_days=None, legal_hold=True, actor="admin:opal")
    change = RetentionChange.objects.get()
    page = operator_client.get(f"/admin/retention/retentionchange/{change.pk}/change/").content.decode()
    rows = _diff_rows(page)
    assert rows["runs_days"][1] == "5" and rows["legal_hold"][1] == "true"
    assert rows["runs_days"][0] in ("(absent)", "(none)")
