"""Black-box, issue 33 items 10, 11 and 13 on A2A: what no column or wire type can hold (a NUL, a
messageId past its varchar(512), a number past a double, NaN in a gRPC Struct) is the binding's
invalid params on a live uvicorn + grpc_serve + Celery worker, through a2a-sdk's clients on all
three bindings (raw httpx only for what the SDK will not send: a number past a double, an enum
name the proto lacks), the JSON-RPC id kept; nothing is stored. historyLength -1 and an unknown
ListTasks status are refused alike everywhere; an empty outputs map is no empty Part."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import Client
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from apps.a2a.models import TaskMessage
from apps.runs.models import Run
from tests.a2a.conftest import error_info
from tests.a2a.live import Session, db_read, live_card, only_task, user_message
from tests.a2a.test_grpc import (  # noqa: F401 - fixtures
    Clients,
    _details,
    _live_grpc,
    _raw_error,
    card,
    grpc_address,
    keys,
)

pytestmark = pytest.mark.django_db(transaction=True)

BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
NUL = "\x00"


@pytest.fixture
async def a2a_clients(  # type: ignore[no-untyped-def]
    request,
    live_url: str,
    card: AgentCard,  # noqa: F811
    keys: dict[str, str],  # noqa: F811
) -> AsyncIterator[dict[str, Client]]:
    """{tenant: a2a-sdk Client} on the binding the test parametrizes (indirect)."""
    binding = request.param
    if binding == "GRPC":
        made: dict[str, Any] = {tenant: Clients(card, key) for tenant, key in keys.items()}
    else:
        http_card = await live_card(live_url)
        made = {tenant: Session(http_card, binding, key) for tenant, key in keys.items()}
    yield {tenant: each.client() for tenant, each in made.items()}
    for each in made.values():
        await each.close()


def _message(*, message_id: str | None = None, **fields: Any) -> Message:
    message = user_message(prefix="input", **fields)
    if message_id is not None:
        message.message_id = message_id
    return message


def _poisoned() -> dict[str, Callable[[], Message]]:
    """Every caller string of a message that reaches a column or jsonb, poisoned."""
    return {
        "messageId NUL": lambda: _message(text="x", skill="echo", message_id=f"m-{NUL}-{uuid.uuid4()}"),
        "messageId 513": lambda: _message(text="x", skill="echo", message_id="m" * 513),
        "contextId NUL": lambda: _message(text="x", skill="echo", context_id=f"ctx{NUL}"),
        "text part NUL": lambda: _message(text=f"a{NUL}b", skill="echo"),
        "data part NUL": lambda: _message(data={"greeting": f"a{NUL}b"}, skill="echo"),
        "data key NUL": lambda: _message(data={f"k{NUL}": 1}, skill="echo"),
        "skillId NUL": lambda: _message(text="x", skill=f"echo{NUL}"),
        "taskId NUL": lambda: _message(text="x", task_id=f"acme/{NUL}"),
    }


async def _counts() -> tuple[int, int]:
    return await db_read(lambda: (Run.unscoped_all_tenants.count(), TaskMessage.unscoped_all_tenants.count()))


@pytest.mark.parametrize("a2a_clients", BINDINGS, indirect=True)
async def test_nul_and_long_values_are_invalid_params_through_the_sdk(
    a2a_clients: dict[str, Client], request: pytest.FixtureRequest
) -> None:
    acme, globex = a2a_clients["acme"], a2a_clients["globex"]
    binding = request.node.callspec.params["a2a_clients"]
    theirs = await only_task(globex, _message(text="hello", skill="echo"))
    before = await _counts()
    for name, poisoned in _poisoned().items():
        with pytest.raises(InvalidParamsError):
            await only_task(acme, poisoned())
        assert await _counts() == before, name  # refused before anything was stored
    with pytest.raises(InvalidParamsError):
        await acme.list_tasks(ListTasksRequest(context_id=f"ctx{NUL}"))
    if binding != "HTTP+JSON":  # there the id is a path segment, which httpx will not send with a NUL (raw test below)
        with pytest.raises(InvalidParamsError):
            await acme.get_task(GetTaskRequest(id=f"acme/{NUL}"))
        # A foreign task's id answers as an own one would: NUL appended is invalid, plain is unknown.
        with pytest.raises(InvalidParamsError):
            await acme.get_task(GetTaskRequest(id=theirs.id + NUL))
    with pytest.raises(TaskNotFoundError):
        await acme.get_task(GetTaskRequest(id=theirs.id))
    # The longest stored messageId still works; the refusals changed nothing for anyone.
    longest = await only_task(acme, _message(text="x", skill="echo", message_id="m" * 512))
    assert longest.status.state == TaskState.TASK_STATE_COMPLETED
    assert (await globex.get_task(GetTaskRequest(id=theirs.id))).status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("a2a_clients", BINDINGS, indirect=True)
async def test_negative_history_length_is_refused_by_every_operation(a2a_clients: dict[str, Client]) -> None:
    """A2A 1.0 §3.2.4 gives historyLength no negative meaning: SendMessage refuses -1 as GetTask
    and ListTasks do, before any run exists."""
    acme = a2a_clients["acme"]
    task = await only_task(acme, _message(text="x", skill="echo"))
    before = await _counts()
    request = SendMessageRequest(message=_message(text="x", skill="echo"))
    request.configuration.CopyFrom(SendMessageConfiguration(history_length=-1))
    with pytest.raises(InvalidParamsError):
        [event async for event in acme.send_message(request)]
    assert await _counts() == before
    with pytest.raises(InvalidParamsError):
        await acme.get_task(GetTaskRequest(id=task.id, history_length=-1))
    with pytest.raises(InvalidParamsError):
        await acme.list_tasks(ListTasksRequest(history_length=-1))


@pytest.mark.parametrize("a2a_clients", ["GRPC"], indirect=True)
async def test_grpc_struct_numbers_and_enum_values_beyond_json(
    a2a_clients: dict[str, Client],
    grpc_address: str,  # noqa: F811 - a fixture imported by name
    keys: dict[str, str],  # noqa: F811
) -> None:
    """What only the binary binding can carry: NaN and Infinity in a Struct, an enum number the
    proto does not name (a ListTasks status of 99 filtered nothing before). On the wire: the
    INVALID_ARGUMENT status with its one ErrorInfo (reason INVALID_PARAMS), never INTERNAL."""
    refused = await _raw_error(grpc_address, keys["acme"], GetTaskRequest(id=f"acme/{NUL}"))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused
    assert _details(refused)[2].reason == "INVALID_PARAMS"
    acme = a2a_clients["acme"]
    before = await _counts()
    for value in (float("nan"), float("inf"), float("-inf")):
        message = _message(skill="echo")
        message.parts.add().data.struct_value.update({"x": value})
        with pytest.raises(InvalidParamsError):
            await only_task(acme, message)
    assert await _counts() == before
    with pytest.raises(InvalidParamsError):
        await acme.list_tasks(ListTasksRequest(status=99))  # type: ignore[arg-type]


@pytest.mark.parametrize("a2a_clients", BINDINGS, indirect=True)
async def test_empty_outputs_carry_no_empty_part(a2a_clients: dict[str, Client]) -> None:
    acme = a2a_clients["acme"]
    noop = await only_task(acme, _message(text="x", skill="conformance-noop"))  # completes with outputs {}
    echoed = await only_task(acme, _message(data={"greeting": "hi"}, skill="echo"))
    for task in (noop, echoed, await acme.get_task(GetTaskRequest(id=noop.id))):
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert all(part.WhichOneof("content") for artifact in task.artifacts for part in artifact.parts), task
    assert [a.artifact_id for a in noop.artifacts] == []
    assert [a.artifact_id for a in echoed.artifacts] == ["outputs"]


# --- the exact codes, with the request id kept, and what the SDK will not send -----------------


async def _rpc(live_url: str, key: str, method: str, params: dict[str, Any], request_id: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{live_url}/a2a/jsonrpc", json=body, headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"jsonrpc", "id", "error"}, answer
    return dict(answer)


def _send_params(**message: Any) -> dict[str, Any]:
    doc = {"messageId": f"raw-{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{"text": "x"}], **message}
    return {"message": {**doc, "metadata": {"openwop": {"skillId": "echo"}}}}


async def test_raw_wire_codes_keep_the_request_id(live_url: str, keys: dict[str, str]) -> None:  # noqa: F811
    key = keys["acme"]
    cases = {
        "messageId NUL": ("SendMessage", _send_params(messageId=f"m{NUL}")),
        "messageId 5000": ("SendMessage", _send_params(messageId="m" * 5000)),
        "data past a double": ("SendMessage", _send_params(parts=[{"data": {"n": 10**400}}])),
        "data negative past a double": ("SendMessage", _send_params(parts=[{"data": [-(10**309)]}])),
        "historyLength -1": ("SendMessage", {**_send_params(), "configuration": {"historyLength": -1}}),
        "unknown status": ("ListTasks", {"status": "TASK_STATE_BOGUS"}),
        "taskId NUL": ("GetTask", {"id": f"acme/{NUL}"}),
    }
    before = await _counts()
    for index, (name, (method, params)) in enumerate(cases.items()):
        request_id = f"req-{index}" if index % 2 else index + 1
        answer = await _rpc(live_url, key, method, params, request_id)
        assert answer["id"] == request_id and answer["error"]["code"] == -32602, (name, answer)
        assert error_info(answer)["reason"] == "INVALID_PARAMS", name
    assert await _counts() == before
    # A known status still filters (TASK_STATE_UNSPECIFIED is "no filter").
    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(base_url=f"{live_url}/a2a/rest", headers=headers) as rest:
        listed = await rest.get("/tasks", params={"status": "TASK_STATE_WORKING"})
        assert listed.status_code == 200 and listed.json()["tasks"] == []
        # HTTP+JSON: 400 google.rpc.Status, INVALID_ARGUMENT.
        refused = [
            await rest.post("/message:send", json=_send_params(parts=[{"data": {"n": 10**400}}])),
            await rest.post("/message:send", json=_send_params(messageId="m" * 513)),
            await rest.get("/tasks", params={"status": "TASK_STATE_BOGUS"}),
            await rest.get("/tasks", params={"historyLength": "-1"}),
            await rest.get("/tasks", params={"contextId": f"c{NUL}"}),
            await rest.get("/tasks/acme~2F%00x"),
        ]
        for response in refused:
            assert response.status_code == 400, (response.request.url, response.text)
            assert response.json()["error"]["status"] == "INVALID_ARGUMENT", response.text
        # A value the parse step does not look at and the database refuses (a push config id in
        # the path): the mapped DataError, not a 500.
        task = (await rest.post("/message:send", json=_send_params())).json()["task"]
        config = await rest.get(f"/tasks/{task['id'].replace('/', '~2F')}/pushNotificationConfigs/c%00x")
        assert config.status_code in (400, 404), config.text  # 404 if a NUL were ever stored
        assert config.json()["error"]["status"] in ("INVALID_ARGUMENT", "NOT_FOUND"), config.text


def _runs_of(slug: str) -> int:
    return Run.unscoped_all_tenants.filter(tenant__slug=slug).count()


async def test_a_foreign_tenant_sees_nothing_of_the_refusals(live_url: str, keys: dict[str, str]) -> None:  # noqa: F811
    """Cross-tenant: globex's refused requests, aimed at acme's task too, change nothing of acme's."""
    mine = await _rpc_ok(live_url, keys["acme"], "SendMessage", _send_params())
    before = await db_read(lambda: (_runs_of("acme"), _runs_of("globex")))
    poisoned = (
        _send_params(messageId=f"m{NUL}"),
        _send_params(parts=[{"data": {"n": 10**400}}]),
        _send_params(taskId=mine["task"]["id"], parts=[{"text": f"a{NUL}"}]),
    )
    for params in poisoned:
        answer = await _rpc(live_url, keys["globex"], "SendMessage", params, "g")
        assert answer["error"]["code"] == -32602 and answer["id"] == "g", answer
    assert await db_read(lambda: (_runs_of("acme"), _runs_of("globex"))) == before
    again = await _rpc_ok(live_url, keys["acme"], "GetTask", {"id": mine["task"]["id"]})
    assert again["status"]["state"] == "TASK_STATE_COMPLETED" and len(again["history"]) == 1


async def _rpc_ok(live_url: str, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(f"{live_url}/a2a/jsonrpc", json=body, headers=headers)
    return dict(response.json()["result"])
