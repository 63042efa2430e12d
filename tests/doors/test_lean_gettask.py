"""GetTask on the lean route (apps/a2a/lean.py: one SQL statement on the loop's pool) answers the
same bytes as the ORM route Django serves, for every state a task can be in, and isolation holds:
another tenant's task is the same bytes as one that never existed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from apps.agents.services import workflow_create, workflow_fixtures_seed
from apps.runs.models import RunTransport
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.a2a.conftest import user_message
from tests.doors.conftest import Door

ARTIFACTS = {
    "nodes": [
        {"id": "text", "kind": "artifact", "config": {"name": "report", "text": "hello"}},
        {"id": "data", "kind": "artifact", "config": {"name": "numbers", "data": {"n": [1, 2, 3]}}},
        {"id": "done", "kind": "echo", "config": {"output": {"ok": True}}},
    ]
}


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "A2A-Version": "1.0", "Content-Type": "application/json"}


def _rpc(method: str, params: dict[str, Any], request_id: int = 7) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def _send(key: str, message_id: str, skill: str, data: Any = None) -> dict[str, Any]:
    message = user_message(message_id, data=data, metadata={"openwop": {"skillId": skill}})
    response = Client().post(
        "/a2a/jsonrpc",
        data=_rpc("SendMessage", {"message": message}),
        content_type="application/json",
        headers=_headers(key),
    )
    body = response.json()
    assert "result" in body, body
    return body["result"]["task"]


def _run(key: str, workflow_id: str) -> str:
    """A run started on REST's path (any run of the tenant is one of its tasks), settled at once."""
    run = run_create(
        subject=subject_from_api_key(key), workflow_id=workflow_id, inputs={}, transport=RunTransport.REST, inline=True
    )
    return run.run_id


@pytest.fixture
def tasks(door: Door, make_key) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    acme_key, globex_key = make_key("acme"), make_key("globex")
    for slug in ("acme", "globex"):
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    workflow_create(
        tenant=Tenant.objects.get(slug="acme"),
        workflow_id="with-artifacts",
        definition=ARTIFACTS,
        input_schema={"type": "object"},
    )
    made = {
        "completed": _send(acme_key, "m-completed", "conformance-noop")["id"],
        "artifacts": _run(acme_key, "with-artifacts"),
        "failed": _send(acme_key, "m-failed", "conformance-failure")["id"],
        "waiting": _send(acme_key, "m-waiting", "conformance-approval")["id"],
        "foreign": _send(globex_key, "m-foreign", "conformance-noop")["id"],
    }
    return {"acme": acme_key, "globex": globex_key, "ids": made}


@pytest.mark.parametrize("history", [None, 0, 1, 5])
def test_lean_gettask_answers_the_orm_routes_bytes(door: Door, tasks: dict[str, Any], history: int | None) -> None:
    for name in ("completed", "artifacts", "failed", "waiting"):
        params: dict[str, Any] = {"id": tasks["ids"][name]}
        if history is not None:
            params["historyLength"] = history
        body = _rpc("GetTask", params)
        lean = door.request("POST", "/a2a/jsonrpc", content=body, headers=_headers(tasks["acme"]))
        django = Client().post(
            "/a2a/jsonrpc", data=body, content_type="application/json", headers=_headers(tasks["acme"])
        )
        assert lean.status_code == django.status_code == 200
        assert lean.content == django.content, name
        task = lean.json()["result"]
        assert task["id"] == tasks["ids"][name]
        if name == "artifacts":
            assert [a["name"] for a in task["artifacts"]] == ["report", "numbers", "outputs"]
        if name == "waiting":
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert task["metadata"]["openwop"]["interrupt"]["kind"] == "approval"


def test_lean_gettask_rest_binding_matches(door: Door, tasks: dict[str, Any]) -> None:
    task_id = tasks["ids"]["artifacts"]
    for path in (f"/a2a/rest/tasks/{task_id}", f"/a2a/rest/tasks/{task_id.replace('/', '~2F')}?historyLength=0"):
        lean = door.request("GET", path, headers=_headers(tasks["acme"]))
        django = Client().get(path, headers=_headers(tasks["acme"]))
        assert (lean.status_code, lean.content) == (django.status_code, django.content) == (200, django.content)


def test_foreign_task_is_the_unknown_tasks_bytes_on_the_lean_route(door: Door, tasks: dict[str, Any]) -> None:
    foreign = door.request(
        "POST",
        "/a2a/jsonrpc",
        content=_rpc("GetTask", {"id": tasks["ids"]["foreign"]}),
        headers=_headers(tasks["acme"]),
    )
    unknown = door.request(
        "POST", "/a2a/jsonrpc", content=_rpc("GetTask", {"id": "acme/" + "A" * 26}), headers=_headers(tasks["acme"])
    )
    assert foreign.content == unknown.content
    assert foreign.json()["error"]["code"] == -32001
    mine = door.request(
        "POST",
        "/a2a/jsonrpc",
        content=_rpc("GetTask", {"id": tasks["ids"]["foreign"]}),
        headers=_headers(tasks["globex"]),
    )
    assert mine.json()["result"]["id"] == tasks["ids"]["foreign"]


def _page(door: Door | None, key: str, params: dict[str, Any]) -> dict[str, Any]:
    body = _rpc("ListTasks", params)
    if door is None:
        response = Client().post("/a2a/jsonrpc", data=body, content_type="application/json", headers=_headers(key))
    else:
        response = door.request("POST", "/a2a/jsonrpc", content=body, headers=_headers(key))
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    "params",
    [{}, {"pageSize": 2}, {"pageSize": 2, "historyLength": 0}, {"pageSize": 3, "includeArtifacts": True}],
)
def test_lean_listtasks_pages_like_the_orm_route(door: Door, tasks: dict[str, Any], params: dict[str, Any]) -> None:
    """Page by page, the lean route and the ORM route list the same tasks with the same totals; each
    route's nextPageToken continues the other's listing (the token carries a signing time, so the
    two are compared by what they lead to)."""
    seen: list[str] = []
    lean_token = orm_token = None
    while True:
        lean = _page(door, tasks["acme"], {**params, **({"pageToken": orm_token} if orm_token else {})})
        orm = _page(None, tasks["acme"], {**params, **({"pageToken": lean_token} if lean_token else {})})
        assert "result" in lean and "result" in orm, (lean, orm)
        lean_token, orm_token = lean["result"].pop("nextPageToken"), orm["result"].pop("nextPageToken")
        assert lean == orm
        assert bool(lean_token) == bool(orm_token)
        seen.extend(task["id"] for task in lean["result"]["tasks"])
        assert lean["result"]["totalSize"] == 4  # acme's four tasks; globex's is not listed
        if not lean_token:
            break
    assert sorted(seen) == sorted(tasks["ids"][name] for name in ("completed", "artifacts", "failed", "waiting"))


def test_lean_listtasks_refuses_what_the_orm_route_refuses(door: Door, tasks: dict[str, Any]) -> None:
    for params in ({"pageSize": 0}, {"pageSize": 101}, {"historyLength": -1}, {"pageToken": "forged"}):
        assert _page(door, tasks["acme"], params) == _page(None, tasks["acme"], params), params
    # A token minted for another tenant is not a token of this listing.
    globex = _page(door, tasks["globex"], {"pageSize": 1})
    assert globex["result"]["nextPageToken"] == ""
    acme = _page(door, tasks["acme"], {"pageSize": 1})
    foreign = _page(door, tasks["globex"], {"pageSize": 1, "pageToken": acme["result"]["nextPageToken"]})
    assert foreign["error"]["code"] == -32602


@pytest.mark.parametrize("skill", ["conformance-noop", "conformance-failure", "conformance-approval"])
def test_lean_sendmessage_answers_the_task_getTask_shows(door: Door, tasks: dict[str, Any], skill: str) -> None:
    """A blocking SendMessage on the lean route answers with the Task of its committed run: the
    same document the ORM route's GetTask gives for it right after."""
    message = user_message(f"lean-send-{skill}", metadata={"openwop": {"skillId": skill}})
    sent = door.request(
        "POST", "/a2a/jsonrpc", content=_rpc("SendMessage", {"message": message}), headers=_headers(tasks["acme"])
    ).json()
    task = sent["result"]["task"]
    got = (
        Client()
        .post(
            "/a2a/jsonrpc",
            data=_rpc("GetTask", {"id": task["id"]}),
            content_type="application/json",
            headers=_headers(tasks["acme"]),
        )
        .json()
    )
    assert got["result"] == task
    expected = {
        "conformance-noop": "COMPLETED",
        "conformance-failure": "FAILED",
        "conformance-approval": "INPUT_REQUIRED",
    }
    assert task["status"]["state"] == f"TASK_STATE_{expected[skill]}"


def test_lean_card_is_the_django_routes_card(door: Door, tasks: dict[str, Any]) -> None:
    """The public card from the door (its cached document) has Django's bytes, ETag and headers,
    and a matching If-None-Match is a 304 there too."""
    lean = door.request("GET", "/.well-known/agent-card.json")
    django = Client().get("/.well-known/agent-card.json")
    assert (lean.status_code, lean.content) == (django.status_code, django.content) == (200, django.content)
    for header in ("ETag", "Last-Modified", "Cache-Control", "Content-Type", "X-Content-Type-Options"):
        assert lean.headers[header] == django.headers[header], header
    again = door.request("GET", "/.well-known/agent-card.json", headers={"If-None-Match": lean.headers["ETag"]})
    assert (again.status_code, again.content) == (304, b"")


def test_lean_gettask_follows_every_change_of_the_task(door: Door, tasks: dict[str, Any]) -> None:
    """The lean projection is kept per row (apps/a2a/lean.py `task_doc_read`): a task read twice
    unchanged answers the same bytes, and the read after a change answers the change, on both
    routes alike, never the kept document of the state before."""
    task_id = tasks["ids"]["waiting"]
    body = _rpc("GetTask", {"id": task_id})
    headers = _headers(tasks["acme"])
    first = door.request("POST", "/a2a/jsonrpc", content=body, headers=headers)
    again = door.request("POST", "/a2a/jsonrpc", content=body, headers=headers)
    assert first.content == again.content
    assert first.json()["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    cancelled = door.request("POST", "/a2a/jsonrpc", content=_rpc("CancelTask", {"id": task_id}), headers=headers)
    assert cancelled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled.json()
    after = door.request("POST", "/a2a/jsonrpc", content=body, headers=headers)
    assert after.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert "metadata" not in after.json()["result"]  # the interrupt's carrier went with the wait
    django = Client().post("/a2a/jsonrpc", data=body, content_type="application/json", headers=headers)
    assert after.content == django.content
