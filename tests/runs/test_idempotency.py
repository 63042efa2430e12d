"""`Idempotency-Key` on createRun, cancelRun and resolveInterruptByRun (headers.md; runs.md §Create)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.core.errors import Conflict
from apps.runs.idempotency import IdempotencyClaim, idempotency_claim, request_digest
from apps.runs.models import IdempotencyRecord, Run
from apps.runs.services import CREATE_RUN_ENDPOINT
from apps.tenants.models import Tenant
from tests.envelope import assert_envelope
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db

BODY = {"workflowId": "echo", "inputs": {"n": 1}}


def test_replay_answers_the_first_response_and_creates_no_second_run(acme: Caller) -> None:
    first = acme.post("/runs", BODY, **{"Idempotency-Key": "k-1"})
    assert first.status_code == 201
    assert "OpenWOP-Idempotent-Replay" not in first.headers
    replay = acme.post("/runs", BODY, **{"Idempotency-Key": "k-1"})
    assert replay.status_code == 201
    assert replay.headers["OpenWOP-Idempotent-Replay"] == "true"
    assert replay.content == first.content
    assert Run.unscoped_all_tenants.count() == 1


def test_same_key_different_body_is_mismatch(acme: Caller) -> None:
    acme.post("/runs", BODY, **{"Idempotency-Key": "k-2"})
    other = {"workflowId": "echo", "inputs": {"n": 2}}
    assert_envelope(acme.post("/runs", other, **{"Idempotency-Key": "k-2"}), "idempotency_key_mismatch", 409)
    assert Run.unscoped_all_tenants.count() == 1


def test_in_flight_duplicate_is_refused(acme: Caller) -> None:
    tenant = Tenant.objects.get(slug="acme")
    claim = idempotency_claim(
        tenant=tenant,
        endpoint=CREATE_RUN_ENDPOINT,
        key="k-3",
        digest=request_digest(endpoint=CREATE_RUN_ENDPOINT, body=BODY),
    )
    assert isinstance(claim, IdempotencyClaim)
    assert_envelope(acme.post("/runs", BODY, **{"Idempotency-Key": "k-3"}), "idempotency_in_flight", 409)


def test_a_stale_in_flight_claim_is_taken_over(acme: Caller) -> None:
    tenant = Tenant.objects.get(slug="acme")
    idempotency_claim(
        tenant=tenant,
        endpoint=CREATE_RUN_ENDPOINT,
        key="k-4",
        digest=request_digest(endpoint=CREATE_RUN_ENDPOINT, body=BODY),
    )
    IdempotencyRecord.unscoped_all_tenants.update(
        created_at=IdempotencyRecord.unscoped_all_tenants.get().created_at - timedelta(minutes=5)
    )
    assert acme.post("/runs", BODY, **{"Idempotency-Key": "k-4"}).status_code == 201


@pytest.mark.parametrize("key", ["has space", "x" * 256, "caf\u00e9"])
def test_invalid_key_grammar(acme: Caller, key: str) -> None:
    response = acme.client.post(
        "/runs",
        data='{"workflowId": "echo"}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}", "Idempotency-Key": key},
    )
    assert_envelope(response, "idempotency_key_invalid", 400)
    assert not Run.unscoped_all_tenants.exists()


def test_a_failed_create_frees_the_key(acme: Caller) -> None:
    assert_envelope(acme.post("/runs", {"workflowId": "nope"}, **{"Idempotency-Key": "k-5"}), "not_found", 404)
    assert not IdempotencyRecord.unscoped_all_tenants.exists()
    assert acme.post("/runs", BODY, **{"Idempotency-Key": "k-5"}).status_code == 201


def test_keys_are_per_tenant(acme: Caller, globex: Caller) -> None:
    a = acme.post("/runs", BODY, **{"Idempotency-Key": "shared"})
    g = globex.post("/runs", BODY, **{"Idempotency-Key": "shared"})
    assert a.status_code == g.status_code == 201
    assert "OpenWOP-Idempotent-Replay" not in g.headers
    assert a.json()["runId"].startswith("acme/") and g.json()["runId"].startswith("globex/")


def test_an_expired_record_no_longer_replays(acme: Caller) -> None:
    first = acme.post("/runs", BODY, **{"Idempotency-Key": "k-6"}).json()
    IdempotencyRecord.unscoped_all_tenants.update(expires_at=IdempotencyRecord.unscoped_all_tenants.get().created_at)
    second = acme.post("/runs", BODY, **{"Idempotency-Key": "k-6"})
    assert "OpenWOP-Idempotent-Replay" not in second.headers
    assert second.json()["runId"] != first["runId"]


def test_completion_refuses_a_claim_that_was_taken_over(acme: Caller) -> None:
    """Only the current claim may complete the record (a takeover invalidates the old one)."""
    from apps.runs.idempotency import idempotency_complete

    tenant = Tenant.objects.get(slug="acme")
    digest = request_digest(endpoint=CREATE_RUN_ENDPOINT, body=BODY)
    old = idempotency_claim(tenant=tenant, endpoint=CREATE_RUN_ENDPOINT, key="k-7", digest=digest)
    IdempotencyRecord.unscoped_all_tenants.update(
        created_at=IdempotencyRecord.unscoped_all_tenants.get().created_at - timedelta(minutes=5)
    )
    idempotency_claim(tenant=tenant, endpoint=CREATE_RUN_ENDPOINT, key="k-7", digest=digest)
    assert isinstance(old, IdempotencyClaim)
    with pytest.raises(Conflict) as excinfo:
        idempotency_complete(claim=old, run=None, status=201, body={})
    assert excinfo.value.code == "idempotency_in_flight"


def test_a_replayed_cancel_answers_the_first_200_instead_of_run_terminal(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    path = f"/runs/{run_id.replace('/', '~2F')}/cancel"
    first = acme.post(path, {"reason": "x"}, **{"Idempotency-Key": "c-1"})
    replay = acme.post(path, {"reason": "x"}, **{"Idempotency-Key": "c-1"})
    assert first.status_code == replay.status_code == 200
    assert replay.headers["OpenWOP-Idempotent-Replay"] == "true"
    assert replay.content == first.content == f'{{"runId":"{run_id}","status":"cancelled"}}'.encode()
    assert_envelope(acme.post(path, {"reason": "x"}), "run_terminal", 409)  # without the key


def test_a_replayed_resolve_is_not_applied_twice(acme: Caller) -> None:
    from tests.runs.conftest import advance, event_types

    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    path = f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve"
    body = {"resumeValue": {"action": "accept"}}
    first = acme.post(path, body, **{"Idempotency-Key": "r-1"})
    replay = acme.post(path, body, **{"Idempotency-Key": "r-1"})
    assert first.status_code == replay.status_code == 200
    assert replay.headers["OpenWOP-Idempotent-Replay"] == "true" and replay.content == first.content
    assert event_types(run_id).count("interrupt.resolved") == 1
    other = {"resumeValue": {"action": "reject"}}
    assert_envelope(acme.post(path, other, **{"Idempotency-Key": "r-1"}), "idempotency_key_mismatch", 409)


def test_one_key_on_two_endpoints_is_two_records(acme: Caller) -> None:
    created = acme.post("/runs", BODY, **{"Idempotency-Key": "same"})
    run_id = created.json()["runId"]
    cancel = acme.post(f"/runs/{run_id.replace('/', '~2F')}/cancel", None, **{"Idempotency-Key": "same"})
    assert cancel.status_code == 200 and "OpenWOP-Idempotent-Replay" not in cancel.headers
    assert IdempotencyRecord.unscoped_all_tenants.count() == 2
