"""Push registration ceilings (apps/push/limits.py): configs per task, and the tenant's pending
deliveries. Owed deliveries are never dropped; what is refused is a new target."""

from __future__ import annotations

import pytest

from apps.core import egress
from apps.core.errors import RateLimited
from apps.push.limits import PushConfigLimitReached
from apps.push.models import Delivery, DeliveryStatus, PushConfig
from apps.push.services import push_config_create, webhook_register
from apps.runs.models import Run
from tests.core.test_egress import FakeDns
from tests.door_client import DoorClient
from tests.envelope import assert_envelope
from tests.hardening.conftest import a2a_reason, assert_jsonrpc_error
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.example.com/hook"


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns()
    fake.set("hooks.example.com", ["93.184.216.34"])  # a public answer: the guard admits it, nothing connects
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


def test_push_configs_per_task(acme: Caller, globex: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_MAX_PUSH_CONFIGS_PER_TASK = 2
    run_id = acme.create_run("conformance-approval")
    for _ in range(2):
        push_config_create(subject=acme.subject, task_id=run_id, url=HOOK)
    with pytest.raises(PushConfigLimitReached) as refused:
        push_config_create(subject=acme.subject, task_id=run_id, url=HOOK)
    assert refused.value.status == 400 and refused.value.details == {"limit": 2}

    # The A2A door answers invalid params, the JSON-RPC way, and stores nothing.
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "CreateTaskPushNotificationConfig",
        "params": {"taskId": run_id, "url": HOOK},
    }
    response = DoorClient().post(  # the A2A door, as served
        "/a2a/jsonrpc",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}", "A2A-Version": "1.0"},
    )
    assert a2a_reason(assert_jsonrpc_error(response, -32602, 200, 3)) == "INVALID_PARAMS"
    assert PushConfig.unscoped_all_tenants.count() == 2

    # Another task, and another tenant's task, have their own ceilings.
    push_config_create(subject=acme.subject, task_id=acme.create_run("conformance-approval"), url=HOOK)
    push_config_create(subject=globex.subject, task_id=globex.create_run("conformance-approval"), url=HOOK)


def test_pending_deliveries_per_tenant(acme: Caller, globex: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT = 2
    webhook_register(subject=acme.subject, url=HOOK, events=["run.created", "run.started"])
    acme.create_run("conformance-approval")  # run.created -> one pending delivery (none is sent in a db test)
    webhook_register(subject=acme.subject, url=HOOK, events=["run.created"])  # under the ceiling still
    acme.create_run("conformance-approval")
    pending = Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.PENDING).count()
    assert pending >= 2

    with pytest.raises(RateLimited) as refused:
        webhook_register(subject=acme.subject, url=HOOK, events=["run.completed"])
    assert refused.value.headers["Retry-After"] == "30"
    rest = acme.post("/webhooks", {"url": HOOK, "events": ["run.completed"]})
    assert_envelope(rest, "rate_limited", 429)
    assert int(rest["Retry-After"]) >= 1
    run_id = acme.create_run("conformance-approval")
    with pytest.raises(RateLimited):
        push_config_create(subject=acme.subject, task_id=run_id, url=HOOK)

    # A2A's inline config on SendMessage is refused before a run exists.
    runs_before = Run.unscoped_all_tenants.count()
    inline = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "backlog-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": HOOK}},
        },
    }
    response = DoorClient().post(  # the A2A door, as served
        "/a2a/jsonrpc",
        data=inline,
        content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}", "A2A-Version": "1.0"},
    )
    assert a2a_reason(assert_jsonrpc_error(response, -32602, 200, 4)) == "INVALID_PARAMS"
    assert Run.unscoped_all_tenants.count() == runs_before

    # The owed deliveries are all still there; the other tenant registers freely.
    assert Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.PENDING).count() >= pending
    webhook_register(subject=globex.subject, url=HOOK, events=["run.completed"])
    # Once the backlog drains, registration works again.
    Delivery.unscoped_all_tenants.update(status=DeliveryStatus.DELIVERED)
    webhook_register(subject=acme.subject, url=HOOK, events=["run.completed"])
