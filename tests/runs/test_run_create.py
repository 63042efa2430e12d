"""createRun (runs.md §Create)."""

from __future__ import annotations

import pytest

from apps.runs.models import Run
from tests.envelope import assert_envelope
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db


def test_created_answer_and_links(acme: Caller) -> None:
    response = acme.post("/runs", {"workflowId": "echo", "inputs": {"a": 1}})
    assert response.status_code == 201
    body = response.json()
    run_id = body["runId"]
    tenant, _, opaque = run_id.partition("/")
    assert tenant == "acme" and len(opaque) >= 22 and "~" not in opaque
    segment = run_id.replace("/", "~2F")
    assert body == {
        "runId": run_id,
        "status": "pending",
        "eventsUrl": f"/runs/{segment}/events",
        "statusUrl": f"/runs/{segment}",
    }
    assert response.headers["Location"] == f"/runs/{segment}"
    assert response.headers["OpenWOP-Version"]
    # The links resolve at this base.
    assert acme.get(body["statusUrl"]).status_code == 200
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert run.inputs == {"a": 1} and run.transport == "rest"


def test_unknown_workflow_is_not_found(acme: Caller) -> None:
    assert_envelope(acme.post("/runs", {"workflowId": "no-such"}), "not_found", 404)


@pytest.mark.parametrize(
    "body",
    [{}, {"workflowId": "echo", "inputs": [1]}, {"workflowId": "echo", "extra": True}, [1], {"workflowId": 7}],
)
def test_body_is_validated_and_closed(acme: Caller, body: object) -> None:
    assert_envelope(acme.post("/runs", body), "validation_error", 400)
    assert not Run.unscoped_all_tenants.exists()


def test_tenant_id_of_another_tenant_is_refused(acme: Caller) -> None:
    assert_envelope(acme.post("/runs", {"workflowId": "echo", "tenantId": "globex"}), "id_tenant_mismatch", 403)
    assert acme.post("/runs", {"workflowId": "echo", "tenantId": "acme"}).status_code == 201


def test_another_tenants_workflow_is_not_found(acme: Caller, globex: Caller) -> None:
    from apps.agents.services import workflow_create
    from apps.tenants.models import Tenant

    workflow_create(
        tenant=Tenant.objects.get(slug="globex"),
        workflow_id="globex-only",
        definition={"nodes": []},
        input_schema={"type": "object"},
    )
    assert globex.post("/runs", {"workflowId": "globex-only"}).status_code == 201
    assert_envelope(acme.post("/runs", {"workflowId": "globex-only"}), "not_found", 404)


def test_unauthenticated_create_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/runs", data='{"workflowId": "echo"}', content_type="application/json")
    assert_envelope(response, "unauthenticated", 401)


def test_inputs_are_checked_against_the_workflows_schema_as_it_is_now(acme: Caller) -> None:
    """The input schema's validator is kept per schema object (apps/agents/definitions.py): a
    changed workflow is checked against its new schema, never a validator kept for the old one."""
    from apps.agents.definitions import _inputs_validator
    from apps.agents.models import Workflow
    from apps.agents.services import workflow_create
    from apps.tenants.models import Tenant

    def schema(kind: str) -> dict[str, object]:
        return {"type": "object", "properties": {"a": {"type": kind}}, "required": ["a"]}

    acme_tenant = Tenant.objects.get(slug="acme")
    workflow = workflow_create(tenant=acme_tenant, workflow_id="typed", input_schema=schema("string"),
                               definition={"nodes": [{"id": "done", "kind": "echo", "config": {}}]})  # fmt: skip
    for _ in range(2):  # the second check takes the kept validator
        assert_envelope(acme.post("/runs", {"workflowId": "typed", "inputs": {"a": 1}}), "validation_error", 400)
    assert acme.post("/runs", {"workflowId": "typed", "inputs": {"a": "x"}}).status_code == 201
    Workflow.objects.for_tenant(workflow.tenant_id).filter(pk=workflow.pk).update(input_schema=schema("integer"))
    assert acme.post("/runs", {"workflowId": "typed", "inputs": {"a": 1}}).status_code == 201
    assert_envelope(acme.post("/runs", {"workflowId": "typed", "inputs": {"a": "x"}}), "validation_error", 400)
    schema = {"type": "object"}
    assert _inputs_validator(schema) is _inputs_validator(schema)
    assert _inputs_validator(dict(schema)) is not _inputs_validator(schema)
