"""A2A GetTask and ListTasks on the door (one statement each: apps/runs/reads.py) answer the Task
built independently from the ORM's rows, for every state a task can be in; isolation holds (another
tenant's task is the same bytes as one that never existed); and the kept projection follows every
change of the task."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from apps.a2a.models import TaskMessage
from apps.agents.services import workflow_create, workflow_fixtures_seed
from apps.runs.a2a_wire import task_from_view, to_wire
from apps.runs.models import Interrupt, Run, RunEvent, RunTransport
from apps.runs.reads import ArtifactEvent, OpenInterrupt, RunRow, RunSnapshot
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
ACME_TASKS = ("completed", "artifacts", "failed", "waiting")


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "A2A-Version": "1.0", "Content-Type": "application/json"}


def _rpc(method: str, params: dict[str, Any], request_id: int = 7) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def _send(door: Door, key: str, message_id: str, skill: str) -> dict[str, Any]:
    message = user_message(message_id, metadata={"openwop": {"skillId": skill}})
    body = door.request(
        "POST", "/a2a/jsonrpc", content=_rpc("SendMessage", {"message": message}), headers=_headers(key)
    )
    assert "result" in body.json(), body.json()
    return dict(body.json()["result"]["task"])


def _expected(task_id: str, *, history: int | None = None, include_artifacts: bool = True) -> dict[str, Any]:
    """The task's wire document from the ORM's rows (not the door's statement): the projection's
    input assembled by hand, then the one projection."""
    run = Run.unscoped_all_tenants.select_related("workflow").get(run_id=task_id)
    interrupts = Interrupt.unscoped_all_tenants.filter(run=run, resolved_at__isnull=True).order_by("created_at", "pk")
    row = RunRow(
        pk=run.pk, tenant_id=run.tenant_id, run_id=run.run_id, workflow_id=run.workflow.workflow_id,
        context_id=run.context_id, agent_id=run.agent_id, transport=run.transport, status=run.status,
        owner=run.owner, current_node_id=run.current_node_id, error=run.error, outputs=run.outputs,
        last_sequence=run.last_sequence, created_at=run.created_at, updated_at=run.updated_at,
        started_at=run.started_at, completed_at=run.completed_at,
    )  # fmt: skip
    artifacts = RunEvent.unscoped_all_tenants.filter(run=run, type="artifact.created").order_by("sequence")
    messages = TaskMessage.unscoped_all_tenants.filter(run=run).order_by("created_at", "id")
    snapshot = RunSnapshot(
        run=row,
        open_interrupts=tuple(
            OpenInterrupt(interrupt_id=i.interrupt_id, node_id=i.node_id, payload=i.payload) for i in interrupts
        ),
        artifacts=tuple(ArtifactEvent(node_id=event.node_id, payload=event.payload) for event in artifacts),
        documents=[message.document for message in messages],
    )
    return to_wire(task_from_view(snapshot, history_length=history, include_artifacts=include_artifacts))


@pytest.fixture
def tasks(door: Door, make_key) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    acme_key, globex_key = make_key("acme"), make_key("globex")
    for slug in ("acme", "globex"):
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    workflow_create(
        tenant=Tenant.objects.get(slug="acme"), workflow_id="with-artifacts", definition=ARTIFACTS,
        input_schema={"type": "object"},
    )  # fmt: skip
    # A run started on REST's path (any run of the tenant is one of its tasks), settled at once.
    artifacts = run_create(
        subject=subject_from_api_key(acme_key), workflow_id="with-artifacts", inputs={},
        transport=RunTransport.REST, inline=True,
    )  # fmt: skip
    made = {
        "completed": _send(door, acme_key, "m-completed", "conformance-noop")["id"],
        "artifacts": artifacts.run_id,
        "failed": _send(door, acme_key, "m-failed", "conformance-failure")["id"],
        "waiting": _send(door, acme_key, "m-waiting", "conformance-approval")["id"],
        "foreign": _send(door, globex_key, "m-foreign", "conformance-noop")["id"],
    }
    return {"acme": acme_key, "globex": globex_key, "ids": made}


@pytest.mark.parametrize("history", [None, 0, 1, 5])
def test_gettask_answers_the_task_of_the_orm_rows(door: Door, tasks: dict[str, Any], history: int | None) -> None:
    for name in ACME_TASKS:
        params: dict[str, Any] = {"id": tasks["ids"][name]}
        if history is not None:
            params["historyLength"] = history
        answer = door.request("POST", "/a2a/jsonrpc", content=_rpc("GetTask", params), headers=_headers(tasks["acme"]))
        assert answer.status_code == 200
        task = answer.json()["result"]
        assert task == _expected(tasks["ids"][name], history=history), name
        if name == "artifacts":
            assert [a["name"] for a in task["artifacts"]] == ["report", "numbers", "outputs"]
        if name == "waiting":
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert task["metadata"]["openwop"]["interrupt"]["kind"] == "approval"
        if name != "artifacts" and history != 0:
            assert task["history"], name  # the Messages ride in the same statement


def test_gettask_on_the_rest_binding(door: Door, tasks: dict[str, Any]) -> None:
    task_id = tasks["ids"]["artifacts"]
    for path, history in (
        (f"/a2a/rest/tasks/{task_id}", None),
        (f"/a2a/rest/tasks/{task_id.replace('/', '~2F')}?historyLength=0", 0),
    ):
        answer = door.request("GET", path, headers=_headers(tasks["acme"]))
        assert answer.status_code == 200
        assert answer.json() == _expected(task_id, history=history)


def test_a_foreign_task_is_the_unknown_tasks_bytes(door: Door, tasks: dict[str, Any]) -> None:
    def get(task_id: str, key: str) -> Any:
        return door.request("POST", "/a2a/jsonrpc", content=_rpc("GetTask", {"id": task_id}), headers=_headers(key))

    foreign, unknown = get(tasks["ids"]["foreign"], tasks["acme"]), get("acme/" + "A" * 26, tasks["acme"])
    assert foreign.content == unknown.content
    assert foreign.json()["error"]["code"] == -32001
    assert get(tasks["ids"]["foreign"], tasks["globex"]).json()["result"]["id"] == tasks["ids"]["foreign"]


def _page(door: Door, key: str, params: dict[str, Any]) -> dict[str, Any]:
    response = door.request("POST", "/a2a/jsonrpc", content=_rpc("ListTasks", params), headers=_headers(key))
    assert response.status_code == 200
    return dict(response.json())


@pytest.mark.parametrize(
    "params",
    [{}, {"pageSize": 2}, {"pageSize": 2, "historyLength": 0}, {"pageSize": 3, "includeArtifacts": True}],
)
def test_listtasks_pages_the_tasks_newest_status_first(
    door: Door, tasks: dict[str, Any], params: dict[str, Any]
) -> None:
    """Page after page: the caller's tasks only, newest status change first, each as GetTask's
    projection shows it (artifacts only when asked), with the exact total on every page."""
    order = Run.unscoped_all_tenants.filter(run_id__in=[tasks["ids"][n] for n in ACME_TASKS])
    expected_ids = list(order.order_by("-updated_at", "-id").values_list("run_id", flat=True))
    listed: list[dict[str, Any]] = []
    token = None
    while True:
        result = _page(door, tasks["acme"], {**params, **({"pageToken": token} if token else {})})["result"]
        assert result["totalSize"] == 4  # acme's four tasks; globex's is not listed
        listed.extend(result["tasks"])
        token = result["nextPageToken"]
        if not token:
            break
    assert [task["id"] for task in listed] == expected_ids
    include = bool(params.get("includeArtifacts"))
    for task in listed:
        assert task == _expected(task["id"], history=params.get("historyLength"), include_artifacts=include)


def test_listtasks_refuses_bad_arguments_and_foreign_tokens(door: Door, tasks: dict[str, Any]) -> None:
    for params in ({"pageSize": 0}, {"pageSize": 101}, {"historyLength": -1}, {"pageToken": "forged"}):
        assert _page(door, tasks["acme"], params)["error"]["code"] == -32602, params
    globex = _page(door, tasks["globex"], {"pageSize": 1})
    assert globex["result"]["nextPageToken"] == ""
    acme = _page(door, tasks["acme"], {"pageSize": 1})
    foreign = _page(door, tasks["globex"], {"pageSize": 1, "pageToken": acme["result"]["nextPageToken"]})
    assert foreign["error"]["code"] == -32602  # a token minted for another tenant lists nothing


@pytest.mark.parametrize("skill", ["conformance-noop", "conformance-failure", "conformance-approval"])
def test_sendmessage_answers_the_task_gettask_shows(door: Door, tasks: dict[str, Any], skill: str) -> None:
    task = _send(door, tasks["acme"], f"send-{skill}", skill)
    assert task == _expected(task["id"])
    got = door.request(
        "POST", "/a2a/jsonrpc", content=_rpc("GetTask", {"id": task["id"]}), headers=_headers(tasks["acme"])
    )
    assert got.json()["result"] == task
    expected = {
        "conformance-noop": "COMPLETED",
        "conformance-failure": "FAILED",
        "conformance-approval": "INPUT_REQUIRED",
    }
    assert task["status"]["state"] == f"TASK_STATE_{expected[skill]}"


def test_the_doors_card_is_the_django_routes_card(door: Door, tasks: dict[str, Any]) -> None:
    """The public card from the door has Django's bytes, ETag and headers, and a matching
    If-None-Match is a 304 there too."""
    served = door.request("GET", "/.well-known/agent-card.json")
    django = Client().get("/.well-known/agent-card.json")
    assert (served.status_code, served.content) == (django.status_code, django.content) == (200, django.content)
    for header in ("ETag", "Last-Modified", "Cache-Control", "Content-Type", "X-Content-Type-Options"):
        assert served.headers[header] == django.headers[header], header
    again = door.request("GET", "/.well-known/agent-card.json", headers={"If-None-Match": served.headers["ETag"]})
    assert (again.status_code, again.content) == (304, b"")


def test_gettask_follows_every_change_of_the_task(door: Door, tasks: dict[str, Any]) -> None:
    """The projection is kept per version of the run (operations.get_task_doc): a task read twice
    unchanged answers the same bytes, and the read after a change answers the change, never the
    kept document of the state before."""
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
    assert after.json()["result"] == _expected(task_id)
    assert after.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert "metadata" not in after.json()["result"]  # the interrupt's carrier went with the wait
