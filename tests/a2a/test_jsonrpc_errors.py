"""Error shapes on the JSON-RPC interface, in-process (interop.md §A2A error details; map
`a2a.errors`). Every answer is JSON-RPC shaped with exactly one ErrorInfo; never the envelope."""

from __future__ import annotations

import json

import pytest

from apps.audit.models import HostEvent
from apps.facets.services import facet_update
from apps.runs.models import Run
from tests.a2a.conftest import JSONRPC, Caller, advance, error_info, immediately, user_message
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db
APPROVAL = "conformance-approval"  # named: a message naming no skill runs echo (issue 53 item 6)


def _post_raw(client: DoorClient, body: bytes | str, **headers: str):  # type: ignore[no-untyped-def]
    return client.post(JSONRPC, data=body, content_type="application/json", headers=headers)


def _assert_rpc_error(response, code: int, reason: str, request_id=1) -> dict:  # type: ignore[no-untyped-def]
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}, body
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id
    assert body["error"]["code"] == code, body
    assert error_info(body)["reason"] == reason
    assert "OpenWOP-Version" not in response.headers
    return body


@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Basic abc", "Bearer owk_nope.secret"])
def test_every_bad_credential_gets_the_same_bytes(acme: Caller, authorization: str | None) -> None:
    headers = {"A2A-Version": "1.0"}
    if authorization:
        headers["Authorization"] = authorization
    response = _post_raw(acme.client, json.dumps({"jsonrpc": "2.0", "id": 7, "method": "GetTask"}), **headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.content == (
        b'{"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "A valid bearer credential is required.", '
        b'"data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNAUTHENTICATED", '
        b'"domain": "a2a-protocol.org", "metadata": {}}]}}'
    )


def test_bad_json_wrong_jsonrpc_unknown_and_legacy_methods(acme: Caller) -> None:
    auth = acme.headers()
    _assert_rpc_error(_post_raw(acme.client, b"{not json", **auth), -32700, "PARSE_ERROR", request_id=None)
    _assert_rpc_error(_post_raw(acme.client, b"[]", **auth), -32600, "INVALID_REQUEST", request_id=None)
    wrong = json.dumps({"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
    _assert_rpc_error(_post_raw(acme.client, wrong, **auth), -32600, "INVALID_REQUEST")
    _assert_rpc_error(acme.rpc("NoSuchMethod", {}), -32601, "METHOD_NOT_FOUND")
    for legacy in ("message/send", "tasks/get", "tasks/resubscribe", "agent/getAuthenticatedExtendedCard"):
        _assert_rpc_error(acme.rpc(legacy, {}), -32601, "METHOD_NOT_FOUND")


@pytest.mark.parametrize("method", [["SendMessage"], {"name": "SendMessage"}, 7, None])
def test_a_method_that_is_not_a_string_is_an_invalid_request(acme: Caller, method: object) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
    response = _post_raw(acme.client, body, **acme.headers())
    assert response.status_code == 200
    assert _assert_rpc_error(response, -32600, "INVALID_REQUEST")["error"]["message"] == "'method' must be a string."


def test_trailing_slash_is_the_same_interface_without_redirect(acme: Caller) -> None:
    response = acme.client.post(
        JSONRPC + "/",
        data=json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}}),
        content_type="application/json",
        headers=acme.headers(),
    )
    assert response.status_code == 200
    assert response.json()["result"]["nextPageToken"] == ""


def test_non_json_content_type_is_content_type_not_supported(acme: Caller) -> None:
    response = acme.client.post(JSONRPC, data="{'a': 1}", content_type="text/plain", headers=acme.headers())
    _assert_rpc_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED", request_id=None)


@pytest.mark.parametrize("version", ["0.3", "2.0", "1.0.1", "banana"])
def test_unserved_version_is_32009_with_supported_versions(acme: Caller, version: str) -> None:
    body = _assert_rpc_error(acme.rpc("ListTasks", {}, **{"A2A-Version": version}), -32009, "VERSION_NOT_SUPPORTED")
    assert error_info(body)["metadata"] == {"supportedVersions": "1.0"}


def test_every_exchange_leaves_a_negotiation_record(acme: Caller) -> None:
    before = HostEvent.unscoped_all_tenants.filter(type="negotiation.decided").count()
    acme.rpc("ListTasks", {})
    acme.rpc("ListTasks", {}, **{"A2A-Version": "0.3"})
    _post_raw(acme.client, b"{not json", **acme.headers())
    records = list(HostEvent.unscoped_all_tenants.filter(type="negotiation.decided").order_by("sequence"))[before:]
    assert [(r.payload["outcome"], r.payload.get("requested")) for r in records] == [
        ("accepted", "1.0"),
        ("refused", "0.3"),
        ("accepted", "1.0"),
    ]
    assert all(r.subject_id == acme.subject.subject_id and r.durable for r in records)
    assert all("peerDigest" in r.payload and len(r.payload["peerDigest"]) == 64 for r in records)


def test_unknown_malformed_and_foreign_task_ids_are_byte_identical(acme: Caller, globex: Caller) -> None:
    foreign = globex.rpc("SendMessage", immediately(user_message("g-1")), request_id=9).json()["result"]["task"]["id"]
    assert foreign.startswith("globex/")
    answers = {
        label: acme.rpc(method, {"id": task_id}).content
        for label, task_id in [
            ("unknown", "acme/AAAAAAAAAAAAAAAAAAAAAAAAAA"),
            ("foreign", foreign),
            ("malformed", "not a task id"),
            ("projected-foreign", foreign.replace("/", "~2F")),
        ]
        for method in ("GetTask",)
    }
    assert len(set(answers.values())) == 1, answers
    body = json.loads(answers["foreign"])
    assert body["error"]["code"] == -32001 and error_info(body)["reason"] == "TASK_NOT_FOUND"
    assert foreign.encode() not in answers["foreign"]  # the id is not echoed
    # The same on cancel and subscribe; the foreign run is untouched.
    for method in ("CancelTask", "SubscribeToTask"):
        assert acme.rpc(method, {"id": foreign}).content == acme.rpc(method, {"id": "acme/nope-nope-nope-nope"}).content
    assert globex.rpc("GetTask", {"id": foreign}).json()["result"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_push_config_methods_answer_32003_when_push_is_not_offered(acme: Caller) -> None:
    facet_update(protocol="a2a", changes={"push_notifications": False}, actor="test")
    task_id = acme.rpc("SendMessage", immediately(user_message("p-1"))).json()["result"]["task"]["id"]
    for method, params in [
        ("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": "https://example.com/hook"}),
        ("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c"}),
        ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
        ("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "c"}),
    ]:
        _assert_rpc_error(acme.rpc(method, params), -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")


def test_extended_card_is_not_configured_without_agent_cards(acme: Caller) -> None:
    facet_update(protocol="a2a", changes={"agent_cards": False}, actor="test")
    _assert_rpc_error(acme.rpc("GetExtendedAgentCard"), -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")


def test_invalid_params_name_the_field(acme: Caller) -> None:
    body = _assert_rpc_error(acme.rpc("SendMessage", {"message": {"role": "ROLE_USER"}}), -32602, "INVALID_PARAMS")
    assert "message" in error_info(body)["metadata"]["field"]
    body = _assert_rpc_error(
        acme.rpc("SendMessage", immediately(user_message("s-1", metadata={"openwop": {"skillId": "nope"}}))),
        -32602,
        "INVALID_PARAMS",
    )
    assert "'nope'" in body["error"]["message"]
    _assert_rpc_error(acme.rpc("ListTasks", {"pageSize": 101}), -32602, "INVALID_PARAMS")
    _assert_rpc_error(acme.rpc("ListTasks", {"pageSize": 0}), -32602, "INVALID_PARAMS")
    _assert_rpc_error(acme.rpc("ListTasks", {"pageToken": "forged"}), -32602, "INVALID_PARAMS")


def test_multi_turn_rules(acme: Caller) -> None:
    """interop.md §A2A multi-turn: inferred contextId, mismatch refused with no change, terminal -32004."""
    approval = {"metadata": {"openwop": {"skillId": APPROVAL}}}
    started = acme.rpc("SendMessage", immediately(user_message("mt-1", contextId="ctx-1", **approval))).json()[
        "result"
    ]["task"]
    assert started["contextId"] == "ctx-1" and started["status"]["state"] == "TASK_STATE_SUBMITTED"
    run = advance(started["id"])
    assert run.status == "waiting-approval" and run.transport == "a2a"
    sequence = run.last_sequence

    mismatch = acme.rpc(
        "SendMessage",
        immediately(
            user_message("mt-2", text=None, data={"action": "accept"}, taskId=started["id"], contextId="other")
        ),
    )
    _assert_rpc_error(mismatch, -32602, "INVALID_PARAMS")
    run.refresh_from_db()
    assert run.last_sequence == sequence and run.status == "waiting-approval"

    no_value = acme.rpc("SendMessage", immediately(user_message("mt-3", taskId=started["id"])))
    _assert_rpc_error(no_value, -32602, "INVALID_PARAMS")

    resumed = acme.rpc(
        "SendMessage",
        immediately(
            user_message(
                "mt-4", text="ok", taskId=started["id"], metadata={"openwop": {"interrupt": {"action": "accept"}}}
            )
        ),
    ).json()["result"]["task"]
    assert resumed["contextId"] == "ctx-1"  # inferred from the task
    assert resumed["status"]["state"] == "TASK_STATE_WORKING"
    assert advance(started["id"]).status == "completed"

    done = acme.rpc("GetTask", {"id": started["id"]}).json()["result"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["messageId"] for m in done["history"]] == ["mt-1", "mt-4"]
    assert all(m["taskId"] == started["id"] and m["contextId"] == "ctx-1" for m in done["history"])
    assert done["artifacts"] == [
        {"artifactId": "outputs", "name": "outputs", "parts": [{"data": {"approved": True, "action": "accept"}}]}
    ]
    assert acme.rpc("GetTask", {"id": started["id"], "historyLength": 0}).json()["result"].get("history") is None
    assert len(acme.rpc("GetTask", {"id": started["id"], "historyLength": 1}).json()["result"]["history"]) == 1

    sequence = Run.unscoped_all_tenants.get(run_id=started["id"]).last_sequence
    late = acme.rpc("SendMessage", immediately(user_message("mt-5", data={"action": "accept"}, taskId=started["id"])))
    _assert_rpc_error(late, -32004, "UNSUPPORTED_OPERATION")
    assert Run.unscoped_all_tenants.get(run_id=started["id"]).last_sequence == sequence  # nothing appended
    _assert_rpc_error(acme.rpc("CancelTask", {"id": started["id"]}), -32002, "TASK_NOT_CANCELABLE")
    _assert_rpc_error(acme.rpc("SubscribeToTask", {"id": started["id"]}), -32004, "UNSUPPORTED_OPERATION")


def test_message_id_never_creates_a_second_run(acme: Caller, globex: Caller) -> None:
    first = acme.rpc("SendMessage", immediately(user_message("dup-1"))).json()["result"]["task"]
    again = acme.rpc("SendMessage", immediately(user_message("dup-1", text="changed"))).json()["result"]["task"]
    assert again["id"] == first["id"]
    assert Run.unscoped_all_tenants.filter(tenant__slug="acme").count() == 1
    other = globex.rpc("SendMessage", immediately(user_message("dup-1"))).json()["result"]["task"]
    assert other["id"] != first["id"] and other["id"].startswith("globex/")


def test_auth_required_only_for_the_credential_interrupt(acme: Caller) -> None:
    params = immediately(user_message("cred-1", metadata={"openwop": {"skillId": "conformance-credential"}}))
    task_id = acme.rpc("SendMessage", params).json()["result"]["task"]["id"]
    advance(task_id)
    task = acme.rpc("GetTask", {"id": task_id}).json()["result"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    message = task["status"]["message"]
    assert message["role"] == "ROLE_AGENT"
    connect = message["parts"][1]["data"]
    assert connect["provider"] == "conformance" and connect["connectUrl"].startswith("http")
    assert connect["connectUrl"] in message["parts"][0]["text"]
    assert task["metadata"]["openwop"]["interrupt"]["kind"] == "credential"
    listed = acme.rpc("ListTasks", {"status": "TASK_STATE_AUTH_REQUIRED"}).json()["result"]
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert acme.rpc("ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"}).json()["result"]["tasks"] == []

    named = {"metadata": {"openwop": {"skillId": APPROVAL}}}
    approval = acme.rpc("SendMessage", immediately(user_message("appr-1", **named))).json()["result"]["task"]["id"]
    advance(approval)
    state = acme.rpc("GetTask", {"id": approval}).json()["result"]["status"]["state"]
    assert state == "TASK_STATE_INPUT_REQUIRED"


def test_list_tasks_is_the_callers_tenant_only(acme: Caller, globex: Caller) -> None:
    mine = [
        acme.rpc("SendMessage", immediately(user_message(f"l-{i}", contextId="shared-ctx"))).json()["result"]["task"][
            "id"
        ]
        for i in range(3)
    ]
    theirs = globex.rpc("SendMessage", immediately(user_message("l-x", contextId="shared-ctx"))).json()["result"]
    first = acme.rpc("ListTasks", {"pageSize": 2, "contextId": "shared-ctx", "tenant": "globex"}).json()["result"]
    assert first["pageSize"] == 2 and first["totalSize"] == 3 and first["nextPageToken"]
    second = acme.rpc("ListTasks", {"pageSize": 2, "pageToken": first["nextPageToken"]}).json()["result"]
    assert second["nextPageToken"] == ""
    seen = [t["id"] for t in first["tasks"] + second["tasks"]]
    assert sorted(seen) == sorted(mine) and theirs["task"]["id"] not in seen
    assert all("artifacts" not in t for t in first["tasks"])
    # A page token is bound to its tenant.
    _assert_rpc_error(globex.rpc("ListTasks", {"pageToken": first["nextPageToken"]}), -32602, "INVALID_PARAMS")


def test_list_tasks_is_list_runs_newest_status_first(acme: Caller, globex: Caller) -> None:
    """ListTasks reads through runs.reads.page_read, the listRuns read: the same set GET /runs
    returns to the same Subject, ordered by status timestamp (not creation), filtered by
    statusTimestampAfter; the two doors' cursors are not interchangeable (each is bound to its
    order)."""
    older = acme.rpc("SendMessage", immediately(user_message("o-1"))).json()["result"]["task"]["id"]
    newer = acme.rpc("SendMessage", immediately(user_message("o-2"))).json()["result"]["task"]["id"]
    globex.rpc("SendMessage", immediately(user_message("o-3")))
    advance(older)  # the older run's status changes last
    listed = acme.rpc("ListTasks", {}).json()["result"]
    assert [t["id"] for t in listed["tasks"]] == [older, newer] and listed["totalSize"] == 2
    runs = acme.client.get("/runs", headers={"Authorization": f"Bearer {acme.key}"}).json()["runs"]
    assert {r["runId"] for r in runs} == {older, newer}

    after = Run.unscoped_all_tenants.get(run_id=older).updated_at.isoformat().replace("+00:00", "Z")
    since = acme.rpc("ListTasks", {"statusTimestampAfter": after}).json()["result"]
    assert [t["id"] for t in since["tasks"]] == [older]
    assert globex.rpc("ListTasks", {"statusTimestampAfter": after}).json()["result"]["tasks"] == []

    token = acme.rpc("ListTasks", {"pageSize": 1}).json()["result"]["nextPageToken"]
    rest = acme.client.get("/runs", {"limit": 1}, headers={"Authorization": f"Bearer {acme.key}"}).json()
    _assert_rpc_error(acme.rpc("ListTasks", {"pageToken": rest["nextCursor"]}), -32602, "INVALID_PARAMS")
    refused = acme.client.get("/runs", {"cursor": token}, headers={"Authorization": f"Bearer {acme.key}"})
    assert refused.status_code == 400
