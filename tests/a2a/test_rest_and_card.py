"""HTTP+JSON errors as google.rpc.Status, task ids in paths, and the public agent card."""

from __future__ import annotations

import json

import pytest

from apps.a2a.models import SkillRoute
from apps.facets import surfaces
from apps.facets.services import facet_ensure
from tests.a2a.conftest import REST, Caller, advance, immediately, user_message
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db

CARD = "/.well-known/agent-card.json"


def _status(response, http: int, grpc: str, reason: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == http, response.content
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "status", "message", "details"}
    assert body["error"]["code"] == http and body["error"]["status"] == grpc
    infos = [d for d in body["error"]["details"] if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1 and infos[0]["reason"] == reason and infos[0]["domain"] == "a2a-protocol.org"
    assert "OpenWOP-Version" not in response.headers
    return body


def test_rest_errors_are_google_rpc_status(acme: Caller, globex: Caller) -> None:
    anonymous = DoorClient()
    _status(anonymous.get(REST + "/tasks"), 401, "UNAUTHENTICATED", "UNAUTHENTICATED")
    _status(acme.rest_get("/tasks", **{"A2A-Version": "0.3"}), 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")
    bad = acme.client.post(
        REST + "/message:send", data="{nope", content_type="application/json", headers=acme.headers()
    )
    _status(bad, 400, "INVALID_ARGUMENT", "PARSE_ERROR")
    _status(acme.rest_get("/no/such/operation"), 404, "NOT_FOUND", "METHOD_NOT_FOUND")
    _status(acme.client.get("/a2a/elsewhere", headers=acme.headers()), 404, "NOT_FOUND", "METHOD_NOT_FOUND")
    _status(acme.rest_get("/tasks?pageSize=500"), 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    _status(
        acme.rest_post("/tasks/x/pushNotificationConfigs", {"url": "https://e.example/h"}),
        404,
        "NOT_FOUND",
        "TASK_NOT_FOUND",
    )

    foreign = globex.rest_post("/message:send", immediately(user_message("g-1"))).json()["task"]["id"]
    unknown = acme.rest_get("/tasks/acme/AAAAAAAAAAAAAAAAAAAAAAAAAA")
    for variant in (foreign, foreign.replace("/", "~2F"), foreign.replace("/", "%2F")):
        answer = acme.rest_get(f"/tasks/{variant}")
        assert (answer.status_code, answer.content) == (unknown.status_code, unknown.content)
        cancel = acme.rest_post(f"/tasks/{variant}:cancel")
        _status(cancel, 404, "NOT_FOUND", "TASK_NOT_FOUND")
    _status(unknown, 404, "NOT_FOUND", "TASK_NOT_FOUND")


def test_rest_task_ids_in_every_path_form(acme: Caller) -> None:
    approval = {"metadata": {"openwop": {"skillId": "conformance-approval"}}}  # waits, so it can be cancelled
    created = acme.rest_post("/message:send", immediately(user_message("r-1", **approval)))
    assert created.status_code == 200 and created["Content-Type"] == "application/a2a+json"
    task_id = created.json()["task"]["id"]
    assert task_id.startswith("acme/")
    for form in (task_id, task_id.replace("/", "~2F"), task_id.replace("/", "%2F")):
        got = acme.rest_get(f"/tasks/{form}?historyLength=0")
        assert got.status_code == 200 and got.json()["id"] == task_id and "history" not in got.json()
    advance(task_id)
    listed = acme.rest_get("/tasks?status=TASK_STATE_INPUT_REQUIRED&includeArtifacts=true").json()
    assert [t["id"] for t in listed["tasks"]] == [task_id] and listed["nextPageToken"] == ""
    cancelled = acme.rest_post(f"/tasks/{task_id.replace('/', '~2F')}:cancel").json()
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    _status(acme.rest_post(f"/tasks/{task_id}:cancel"), 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")
    _status(acme.rest_post(f"/tasks/{task_id}:subscribe"), 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")


def test_public_card_matches_facets_and_routes(acme: Caller, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_PUBLIC_URL = "https://host.example"
    anonymous = DoorClient()
    response = anonymous.get(CARD)
    assert response.status_code == 200 and response["Cache-Control"].startswith("public, max-age=")
    assert response["ETag"] and response["Last-Modified"]
    card = response.json()
    facet = facet_ensure(protocol="a2a")
    assert [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        ("JSONRPC", "1.0"),
        ("HTTP+JSON", "1.0"),
    ]
    assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == set(facet.versions)
    assert card["supportedInterfaces"][0]["url"] == "https://host.example/a2a/jsonrpc"
    assert all("tenant" not in i for i in card["supportedInterfaces"])
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True, "extendedAgentCard": True}
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["skills"][0]["id"] == "echo"  # the default skill first: it answers (issue 53 item 6)
    assert {s["id"] for s in card["skills"]} == set(SkillRoute.objects.values_list("workflow_id", flat=True))
    assert all(s["tags"] and s["name"] and s["description"] for s in card["skills"])

    # Served with or without A2A-Version; a matching ETag is 304.
    assert anonymous.get(CARD, headers={"A2A-Version": "0.3"}).content == response.content
    assert anonymous.get(CARD, headers={"If-None-Match": response["ETag"]}).status_code == 304

    # Operator edits reach the card: a disabled route leaves it and refuses messages.
    SkillRoute.objects.filter(workflow_id="conformance-noop").update(enabled=False)  # echo is the default
    assert "conformance-noop" not in {s["id"] for s in anonymous.get(CARD).json()["skills"]}
    named = {"metadata": {"openwop": {"skillId": "conformance-noop"}}}
    refused = acme.rpc("SendMessage", immediately(user_message("e-1", **named)))
    assert refused.json()["error"]["code"] == -32602


def test_capabilities_follow_the_facet(acme: Caller) -> None:
    from apps.facets.services import facet_update

    facet_update(protocol="a2a", changes={"streaming": False, "durable_tasks": False}, actor="test")
    card = DoorClient().get(CARD).json()
    assert card["capabilities"]["streaming"] is False
    refused = acme.rpc("SendStreamingMessage", {"message": user_message("st-1")})
    assert refused.json()["error"]["code"] == -32004
    refused = acme.rpc("SendMessage", immediately(user_message("st-2")))
    assert refused.json()["error"]["code"] == -32004
    assert acme.rpc("SubscribeToTask", {"id": "acme/whatever-whatever-1"}).json()["error"]["code"] == -32004
    assert surfaces.is_served(surfaces.A2A_STREAMING)  # the surface stays; the facet switched it off


def test_discovery_advertises_the_a2a_facet(settings) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(DoorClient().get("/.well-known/openwop").content)
    record = document["a2a"]
    assert record["agentCardUrl"] == settings.OPENWOP_PUBLIC_URL + "/.well-known/agent-card.json"
    assert record["streaming"] is True and record["durableTasks"] is True and record["pushNotifications"] is True
    assert record["agentCards"] is True  # per-agent cards are served (interop.md §Per-agent cards)
