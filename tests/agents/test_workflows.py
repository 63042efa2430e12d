"""Workflows: fixture seeding, definition checks, getWorkflow, and discovery's fixtures[]."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client

from apps.agents.fixtures import (
    FIXTURE_WORKFLOWS,
    MCP_CONFORMANCE_FIXTURES,
    MCP_CONTENT_FIXTURES,
    MCP_STREAM_FIXTURES,
    OPENWOP_SUITE_FIXTURES,
)
from apps.agents.models import Workflow
from apps.agents.services import workflow_create, workflow_fixtures_seed
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.envelope import assert_envelope

pytestmark = pytest.mark.django_db

FIXTURE_IDS = sorted(
    [
        "a2a-tck",
        "conformance-approval",
        "conformance-cancellable",
        "conformance-credential",
        "conformance-delay",
        "conformance-failure",
        "conformance-noop",
        "echo",
        *MCP_CONFORMANCE_FIXTURES,  # the tools the MCP conformance suite calls by name
        *MCP_CONTENT_FIXTURES,  # conformance-artifact and the suite's rich-content tools
        *MCP_STREAM_FIXTURES,  # the suite's logging and progress tools
        *OPENWOP_SUITE_FIXTURES,  # the rest of the OpenWOP conformance suite's fixture contract
    ]
)


def test_a_new_tenant_is_seeded_with_the_fixtures(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks(execute=True):
        tenant, _ = tenant_get_or_create(slug="newco")
    assert sorted(Workflow.objects.for_tenant(tenant).values_list("workflow_id", flat=True)) == FIXTURE_IDS


def test_seeding_is_idempotent_and_repairs_a_changed_fixture(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks(execute=True):
        tenant, _ = tenant_get_or_create(slug="newco")
    Workflow.objects.for_tenant(tenant).filter(workflow_id="echo").update(definition={"nodes": []})
    workflow_fixtures_seed(tenant=tenant)
    workflow_fixtures_seed(tenant=tenant)
    assert Workflow.objects.for_tenant(tenant).count() == len(FIXTURE_IDS)
    assert (
        Workflow.objects.for_tenant(tenant).get(workflow_id="echo").definition
        == FIXTURE_WORKFLOWS["echo"]["definition"]
    )


def test_seed_demo_seeds_the_demo_tenant_every_time(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    demo = Tenant.objects.get(slug="demo")
    Workflow.objects.for_tenant(demo).filter(workflow_id="echo").delete()
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 - second run: hooks re-seed
    assert Workflow.objects.for_tenant(demo).count() == len(FIXTURE_IDS)


def test_discovery_lists_the_fixtures_and_the_run_list_record(client: Client) -> None:
    doc = client.get("/.well-known/openwop").json()
    assert set(FIXTURE_IDS) <= set(doc["fixtures"])
    assert doc["runList"] == {
        "status": "stable",
        "since": "2.46",
        "witness": "witnessable-gated",
        "maxPageSize": 100,
        "filters": ["workflowId", "status"],
    }
    assert doc["idempotency"]["status"] == "stable"


@pytest.mark.parametrize(
    ("definition", "problem"),
    [
        ({"nodes": [{"id": "a", "kind": "teleport", "config": {}}]}, "unknown node kind"),
        ({"nodes": [{"id": "a", "kind": "echo"}, {"id": "a", "kind": "echo"}]}, "used twice"),
        ({"nodes": [{"id": "a b", "kind": "echo"}]}, "node id"),
        ({"nodes": [{"id": "d", "kind": "delay", "config": {"delayMs": -1}}]}, "delayMs"),
        ({"nodes": [{"id": "f", "kind": "fail", "config": {}}]}, "code"),
        ({"nodes": [{"id": "x", "kind": "artifact", "config": {"name": "n"}}]}, "config"),
    ],
)
def test_definitions_are_checked(tenant: Tenant, definition: dict, problem: str) -> None:
    with pytest.raises(ValidationFailed) as excinfo:
        workflow_create(tenant=tenant, workflow_id="bad", definition=definition, input_schema={"type": "object"})
    assert any(problem in error for error in excinfo.value.details["errors"])
    assert not Workflow.objects.for_tenant(tenant).filter(workflow_id="bad").exists()


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": 7}, []])
def test_input_schema_must_describe_an_object(tenant: Tenant, schema: object) -> None:
    with pytest.raises(ValidationFailed):
        workflow_create(tenant=tenant, workflow_id="bad", definition={"nodes": []}, input_schema=schema)  # type: ignore[arg-type]


def test_workflow_ids_follow_the_author_grammar(tenant: Tenant) -> None:
    with pytest.raises(ValidationFailed):
        workflow_create(
            tenant=tenant, workflow_id="has/slash", definition={"nodes": []}, input_schema={"type": "object"}
        )
    assert (
        workflow_create(
            tenant=tenant, workflow_id="ns:name.v1~x", definition={"nodes": []}, input_schema={"type": "object"}
        ).workflow_id
        == "ns:name.v1~x"
    )


def test_get_workflow(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    response = client.get("/workflows/conformance-delay", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert response.json() == {
        "workflowId": "conformance-delay",
        "name": FIXTURE_WORKFLOWS["conformance-delay"]["name"],
        "description": FIXTURE_WORKFLOWS["conformance-delay"]["description"],
        "inputSchema": FIXTURE_WORKFLOWS["conformance-delay"]["input_schema"],
        "nodes": [{"nodeId": "delay", "kind": "delay"}],
    }


def test_get_workflow_is_tenant_scoped(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    acme_key, globex_key = make_key("acme"), make_key("globex")
    workflow_create(
        tenant=Tenant.objects.get(slug="globex"),
        workflow_id="secret:plan",
        definition={"nodes": []},
        input_schema={"type": "object"},
    )
    assert client.get("/workflows/secret%3Aplan", headers={"Authorization": f"Bearer {globex_key}"}).status_code == 200
    foreign = client.get("/workflows/secret%3Aplan", headers={"Authorization": f"Bearer {acme_key}"})
    unknown = client.get("/workflows/never-was", headers={"Authorization": f"Bearer {acme_key}"})
    assert_envelope(foreign, "not_found", 404)
    assert_envelope(unknown, "not_found", 404)
    assert_envelope(client.get("/workflows/echo"), "unauthenticated", 401)
