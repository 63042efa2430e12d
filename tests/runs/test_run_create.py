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
