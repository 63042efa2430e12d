"""Black-box, issue 33 items 10 and 11 on the REST wire (live uvicorn + Celery worker, httpx): a
NUL or a number past a double in a body, or a NUL in a path segment, is `400 validation_error`
naming the field, never a 500; nothing is stored; a foreign run stays 403 whatever it is sent."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from apps.runs.models import Run
from tests.live import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


def _client(live_url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=live_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _refused(response: httpx.Response, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "validation_error", body
    if field is not None:
        assert body["details"]["field"] == field, body
    return dict(body)


def _waiting(http: httpx.Client, run_path: str) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (doc := http.get(run_path).json())["status"] == "waiting-approval" and doc,
            "the run waits for approval",
        )
    )


def test_bodies_and_paths_no_column_can_hold(live_url: str, keys: dict[str, str]) -> None:
    before = Run.unscoped_all_tenants.count()
    with _client(live_url, keys["acme"]) as acme, _client(live_url, keys["globex"]) as globex:
        _refused(
            acme.post("/runs", json={"workflowId": "echo", "inputs": {"greeting": f"a{NUL}"}}), "body.inputs.greeting"
        )
        _refused(acme.post("/runs", json={"workflowId": "echo", "inputs": {"n": 10**400}}), "body.inputs.n")
        _refused(acme.post("/runs", json={"workflowId": "echo", "inputs": {f"k{NUL}": 1}}))
        _refused(acme.post("/runs", json={"workflowId": f"echo{NUL}"}))
        assert Run.unscoped_all_tenants.count() == before

        created = acme.post("/runs", json={"workflowId": "conformance-approval", "inputs": {}})
        assert created.status_code == 201, created.text
        run_path = created.json()["statusUrl"]
        _waiting(acme, run_path)
        _refused(acme.post(f"{run_path}/interrupts/%00", json={"resumeValue": {"action": "accept"}}), "nodeId")
        _refused(
            acme.post(
                f"{run_path}/interrupts/approve", json={"resumeValue": {"action": "accept", "comment": f"x{NUL}"}}
            )
        )
        # Cross-tenant: globex gets the 403 of a foreign run, poisoned or not, and changes nothing.
        foreign = globex.post(f"{run_path}/interrupts/%00", json={"resumeValue": {"action": "accept"}})
        assert foreign.status_code == 403 and foreign.json()["error"] == "id_tenant_mismatch", foreign.text
        assert _waiting(acme, run_path)["status"] == "waiting-approval"
        interrupt = acme.get(run_path).json()["interrupt"]
        resolved = acme.post(f"{run_path}/interrupts/{interrupt['nodeId']}", json={"resumeValue": {"action": "accept"}})
        assert resolved.status_code == 200, resolved.text
