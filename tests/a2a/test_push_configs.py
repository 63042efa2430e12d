"""The four push-config methods on both A2A bindings, through apps.push (interop.md §A2A push
delivery): credentials never come back, a foreign task or configId answers exactly like an
unknown one, delete is idempotent, a hostile receiver URL is refused before anything exists."""

from __future__ import annotations

import ipaddress
import json

import pytest

from apps.push.models import PushConfig
from tests.a2a.conftest import Caller, error_info, immediately, user_message

pytestmark = pytest.mark.django_db
HOOK = "https://receiver.example/hooks/a2a"


@pytest.fixture(autouse=True)
def public_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    # No network here: the receiver's name resolves to a public documentation-free address.
    monkeypatch.setattr("apps.core.egress.resolve_host", lambda host, port: [ipaddress.ip_address("93.184.216.34")])


def _result(response) -> dict:  # type: ignore[no-untyped-def, type-arg]
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def _task(caller: Caller, message_id: str) -> str:
    return _result(caller.rpc("SendMessage", immediately(user_message(message_id))))["task"]["id"]


def test_jsonrpc_create_get_list_delete(acme: Caller) -> None:
    task_id = _task(acme, "push-1")
    created = _result(
        acme.rpc(
            "CreateTaskPushNotificationConfig",
            {"taskId": task_id, "url": HOOK, "authentication": {"scheme": "Bearer", "credentials": "s3cret-cred"}},
        )
    )
    assert created["taskId"] == task_id and created["url"] == HOOK and created["authentication"] == {"scheme": "Bearer"}
    config_id = created["id"]
    assert "acme" not in config_id and "/" not in config_id
    got = _result(acme.rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}))
    assert got == created
    listed = _result(acme.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))
    assert listed["configs"] == [created]
    for _ in range(2):  # idempotent
        assert _result(acme.rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})) == {}
    assert _result(acme.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})).get("configs", []) == []
    assert not PushConfig.unscoped_all_tenants.filter(config_id=config_id).exists()


def test_credentials_never_come_back(acme: Caller) -> None:
    task_id = _task(acme, "push-2")
    responses = [
        acme.rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK, "token": "tok-abc-123"}),
        acme.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}),
        acme.rest_get(f"/tasks/{task_id}/pushNotificationConfigs"),
    ]
    for response in responses:
        assert "tok-abc-123" not in response.content.decode()


def test_foreign_task_and_foreign_config_answer_like_unknown(acme: Caller, globex: Caller) -> None:
    mine = _task(acme, "push-3")
    theirs = _task(globex, "push-4")
    config_id = _result(globex.rpc("CreateTaskPushNotificationConfig", {"taskId": theirs, "url": HOOK}))["id"]
    unknown = acme.rpc("GetTaskPushNotificationConfig", {"taskId": mine, "id": "no-such-config-id-000000"})
    assert error_info(unknown.json())["reason"] == "TASK_NOT_FOUND"
    probes = [
        ("GetTaskPushNotificationConfig", {"taskId": theirs, "id": config_id}),  # foreign task
        ("GetTaskPushNotificationConfig", {"taskId": mine, "id": config_id}),  # foreign configId on my task
        ("DeleteTaskPushNotificationConfig", {"taskId": theirs, "id": config_id}),
        ("ListTaskPushNotificationConfigs", {"taskId": theirs}),
        ("CreateTaskPushNotificationConfig", {"taskId": theirs, "url": HOOK}),
    ]
    for method, params in probes:
        answer = acme.rpc(method, params)
        assert (answer.status_code, answer.content) == (unknown.status_code, unknown.content), method
    assert PushConfig.unscoped_all_tenants.filter(config_id=config_id).exists()  # globex's config untouched


@pytest.mark.parametrize(
    "url", ["http://receiver.example/h", "https://127.0.0.1/h", "https://user:pw@receiver.example/h"]
)
def test_hostile_receiver_is_invalid_params(acme: Caller, url: str) -> None:
    task_id = _task(acme, f"push-bad-{abs(hash(url))}")
    body = acme.rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url}).json()
    assert body["error"]["code"] == -32602 and error_info(body)["metadata"]["field"] == "url"
    assert "pw" not in json.dumps(body)


def test_rest_binding(acme: Caller) -> None:
    task_id = _task(acme, "push-5")
    created = acme.rest_post(f"/tasks/{task_id}/pushNotificationConfigs", {"url": HOOK}).json()
    assert created["url"] == HOOK and created["taskId"] == task_id
    projected = task_id.replace("/", "~2F")
    assert acme.rest_get(f"/tasks/{projected}/pushNotificationConfigs").json()["configs"] == [created]
    assert acme.rest_get(f"/tasks/{task_id}/pushNotificationConfigs/{created['id']}").json() == created
    deleted = acme.client.delete(
        f"/a2a/rest/tasks/{task_id}/pushNotificationConfigs/{created['id']}", headers=acme.headers()
    )
    assert deleted.status_code == 200
    assert acme.rest_get(f"/tasks/{task_id}/pushNotificationConfigs").json().get("configs", []) == []


def test_inline_config_on_send_message(acme: Caller) -> None:
    params = immediately(user_message("push-6"))
    params["configuration"]["taskPushNotificationConfig"] = {"url": HOOK, "token": "inline-token"}
    task_id = _result(acme.rpc("SendMessage", params))["task"]["id"]
    configs = _result(acme.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}))["configs"]
    assert [c["url"] for c in configs] == [HOOK] and configs[0]["taskId"] == task_id

    refused = immediately(user_message("push-7"))
    refused["configuration"]["taskPushNotificationConfig"] = {"url": "http://receiver.example/h"}
    body = acme.rpc("SendMessage", refused).json()
    assert body["error"]["code"] == -32602
    from apps.a2a.models import TaskMessage

    assert not TaskMessage.unscoped_all_tenants.filter(message_id="push-7").exists()  # no run was started


def test_inline_config_on_a_blocking_send_hears_a_run_settled_at_once(acme: Caller) -> None:
    """A blocking send settles an instant run in its one transaction; the request's config is
    written in that transaction before the run's events, so every status update is owed to it,
    the final one included, and its credential is kept until that push settles."""
    from apps.push.models import Delivery

    params = {
        "message": user_message("push-8", metadata={"openwop": {"skillId": "conformance-noop"}}),
        "configuration": {"taskPushNotificationConfig": {"url": HOOK, "token": "inline-token"}},
    }
    task = _result(acme.rpc("SendMessage", params))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    config = PushConfig.unscoped_all_tenants.get(run__run_id=task["id"])
    assert config.credentials_sealed is not None  # wiped once the final push settles, not before
    deliveries = list(Delivery.unscoped_all_tenants.filter(push_config=config).order_by("event__sequence"))
    states = [json.loads(d.body)["statusUpdate"]["status"]["state"] for d in deliveries]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert [d.is_final for d in deliveries] == [False, True]
