"""Black-box: the a2a-sdk 1.3.0 gRPC client against a live `manage.py grpc_serve` + Celery worker
(the third binding, apps/a2a/grpc_server.py), and the raw stub where bytes on the wire matter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import trustme
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    SubscribeToTaskRequest,
    TaskState,
    a2a_pb2_grpc,
)
from a2a.utils.errors import A2AError, TaskNotFoundError, UnsupportedOperationError
from django.test import override_settings
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from apps.a2a.card import public_card_current
from apps.a2a.errors import ERROR_ROWS
from apps.a2a.grpc_server import refused_for_error
from apps.agents.routing_values import a2a_tenant_of
from apps.agents.services import agent_create
from apps.audit.models import HostEvent
from apps.runs.models import Run
from apps.tenants.models import Tenant
from tests.a2a.conftest import Caller
from tests.a2a.live import bearer_channel, db_read, only_task, reattached_until_done, send, until_terminal, user_message
from tests.door_client import DoorClient
from tests.live import LiveProcess, start_grpc
from tests.metrics_samples import scraped_in_process

DETAILS_KEY = "grpc-status-details-bin"


@pytest.fixture(scope="session")
def _live_grpc(_live_env) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, var_dir = _live_env
    live: LiveProcess
    live, address = start_grpc(env, var_dir)
    yield address
    live.stop()


@pytest.fixture
def grpc_address(_live_grpc: str, live_worker, transactional_db) -> str:  # type: ignore[no-untyped-def]
    """host:port of a grpc_serve against this test's (committed) database, with a worker running."""
    return _live_grpc


@pytest.fixture
def keys(grpc_address: str, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


@pytest.fixture
async def card(grpc_address: str) -> AgentCard:
    """The public card as this host builds it when grpc_serve is configured at the live address."""

    def build() -> AgentCard:
        with override_settings(OPENWOP_GRPC_ENABLED=True, OPENWOP_GRPC_URL=grpc_address):
            return public_card_current()[0]

    return await db_read(build)


class Clients:
    """One principal's sdk clients over gRPC, made from the card (the GRPC interface chosen)."""

    def __init__(self, card: AgentCard, key: str) -> None:
        self.card, self.key = card, key
        self.channels: list[grpc.aio.Channel] = []

    def _channel(self, url: str) -> grpc.aio.Channel:
        channel = bearer_channel(url, self.key)
        self.channels.append(channel)
        return channel

    def client(self, *, streaming: bool = False) -> Client:
        config = ClientConfig(
            streaming=streaming, supported_protocol_bindings=["GRPC"], grpc_channel_factory=self._channel
        )
        return ClientFactory(config).create(self.card)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


@pytest.fixture
async def clients(card: AgentCard, keys: dict[str, str]) -> AsyncIterator[dict[str, Clients]]:
    made = {tenant: Clients(card, key) for tenant, key in keys.items()}
    yield made
    for each in made.values():
        await each.close()


def _message(*, text: str | None = None, data: Any = None, skill: str | None = None, **fields: Any) -> Message:
    return user_message(prefix="grpc", text=text, data=data, skill=skill, **fields)


async def _raw_error(address: str, key: str, request: GetTaskRequest, version: str = "1.0") -> grpc.aio.AioRpcError:
    """A GetTask over the bare generated stub, to see the status and the details bytes as sent."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        metadata = (("authorization", f"Bearer {key}"), ("a2a-version", version))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetTask(request, metadata=metadata)
    return caught.value


def _details(error: grpc.aio.AioRpcError) -> tuple[bytes, status_pb2.Status, error_details_pb2.ErrorInfo]:
    raw = dict(error.trailing_metadata() or ())[DETAILS_KEY]
    status = status_pb2.Status.FromString(raw)
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1, status
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    assert info.domain == "a2a-protocol.org"
    return raw, status, info


async def test_card_lists_grpc_after_jsonrpc_and_http_json(card: AgentCard, grpc_address: str) -> None:
    bindings = [i.protocol_binding for i in card.supported_interfaces]
    assert bindings == ["JSONRPC", "HTTP+JSON", "GRPC"]
    assert card.supported_interfaces[-1].url == grpc_address


async def test_send_get_list_cancel_and_isolation(clients: dict[str, Clients]) -> None:
    acme, globex = clients["acme"].client(), clients["globex"].client()

    echoed = await only_task(acme, _message(data={"greeting": "hi"}, skill="echo", context_id="ctx-grpc"))
    assert echoed.status.state == TaskState.TASK_STATE_COMPLETED
    assert echoed.id.startswith("acme/") and echoed.context_id == "ctx-grpc"
    assert json_format.MessageToDict(echoed.artifacts[-1].parts[0].data) == {"greeting": "hi"}
    run = await db_read(lambda: Run.unscoped_all_tenants.get(run_id=echoed.id))
    assert run.transport == "a2a"
    assert (await acme.get_task(GetTaskRequest(id=echoed.id))).status.state == TaskState.TASK_STATE_COMPLETED

    slow = await only_task(acme, _message(data={"waitMs": 120000}, skill="conformance-cancellable"), immediately=True)
    assert slow.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    cancelled = await acme.cancel_task(CancelTaskRequest(id=slow.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED  # the answer itself (issue 32 item 1)
    assert (await until_terminal(acme, slow.id)).status.state == TaskState.TASK_STATE_CANCELED

    theirs = await only_task(globex, _message(text="hello", skill="echo", context_id="ctx-grpc"))
    first = await acme.list_tasks(ListTasksRequest(page_size=1))
    assert len(first.tasks) == 1 and first.next_page_token and first.total_size == 2
    rest = await acme.list_tasks(ListTasksRequest(page_size=1, page_token=first.next_page_token))
    assert rest.next_page_token == "" and {t.id for t in [*first.tasks, *rest.tasks]} == {echoed.id, slow.id}
    by_context = await acme.list_tasks(ListTasksRequest(context_id="ctx-grpc"))
    assert [t.id for t in by_context.tasks] == [echoed.id] and theirs.id not in {t.id for t in by_context.tasks}

    with pytest.raises(TaskNotFoundError):
        await acme.get_task(GetTaskRequest(id=theirs.id))
    with pytest.raises(TaskNotFoundError):
        await acme.cancel_task(CancelTaskRequest(id=theirs.id))

    # Every exchange left its negotiation record as acme's durable host event.
    records = await db_read(
        lambda: list(HostEvent.unscoped_all_tenants.filter(tenant__slug="acme", type="negotiation.decided"))
    )
    assert len(records) >= 8 and all(r.payload["outcome"] == "accepted" for r in records)
    assert all(r.payload["requested"] == "1.0" and r.payload["version"] == "1.0" for r in records)


async def test_streaming_send_and_resubscribe(clients: dict[str, Clients]) -> None:
    acme = clients["acme"]
    streaming, plain = acme.client(streaming=True), acme.client()

    events = await send(streaming, _message(text="stream me", skill="conformance-approval"))
    assert events[0].HasField("task")
    task_id = events[0].task.id
    assert all(e.HasField("status_update") and e.status_update.task_id == task_id for e in events[1:])
    final = events[-1].status_update.status.state if len(events) > 1 else events[0].task.status.state
    assert final == TaskState.TASK_STATE_INPUT_REQUIRED

    accept = _message(data={"action": "accept"}, task_id=task_id)
    received = await reattached_until_done(streaming, plain, task_id, accept)
    assert received[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert [e.artifact_update.artifact.artifact_id for e in received if e.HasField("artifact_update")] == ["outputs"]

    with pytest.raises(UnsupportedOperationError):
        [event async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id))]


async def test_push_configs_and_extended_card(clients: dict[str, Clients]) -> None:
    acme, globex = clients["acme"].client(), clients["globex"].client()
    mine = await only_task(acme, _message(text="x", skill="echo"))
    listed = await acme.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=mine.id))
    assert list(listed.configs) == []
    with pytest.raises(TaskNotFoundError):
        await globex.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=mine.id))
    card = await acme.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert card.name == "openwop-host" and card.supported_interfaces[0].protocol_binding == "JSONRPC"


async def test_foreign_task_is_byte_identical_to_unknown(
    clients: dict[str, Clients], keys: dict[str, str], grpc_address: str
) -> None:
    # A blocking send: the task is settled, so no worker is still writing when the test ends.
    theirs = await only_task(clients["globex"].client(), _message(text="x", skill="echo"))
    unknown = await _raw_error(grpc_address, keys["acme"], GetTaskRequest(id=f"globex/{uuid.uuid4().hex}"))
    foreign = await _raw_error(grpc_address, keys["acme"], GetTaskRequest(id=theirs.id))
    assert unknown.code() == foreign.code() == grpc.StatusCode.NOT_FOUND
    assert unknown.details() == foreign.details()
    unknown_raw, _, info = _details(unknown)
    foreign_raw, _, _ = _details(foreign)
    assert unknown_raw == foreign_raw and info.reason == "TASK_NOT_FOUND"


async def test_bad_version_is_refused_with_its_record(keys: dict[str, str], grpc_address: str) -> None:
    refused = await _raw_error(grpc_address, keys["acme"], GetTaskRequest(id="acme/x"), version="0.3")
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    _, status, info = _details(refused)
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert info.reason == "VERSION_NOT_SUPPORTED" and info.metadata["supportedVersions"] == "1.0"
    records = await db_read(
        lambda: list(HostEvent.unscoped_all_tenants.filter(tenant__slug="acme", type="negotiation.decided"))
    )
    assert [(r.payload["outcome"], r.payload.get("requested")) for r in records] == [("refused", "0.3")]


def test_tls_when_certificate_and_key_are_set(live_env, tmp_path, transactional_db) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    authority = trustme.CA()
    server_cert = authority.issue_cert("127.0.0.1")
    server_cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    server_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    tls_env = {
        **env,
        "OPENWOP_GRPC_TLS_CERT": str(tmp_path / "cert.pem"),
        "OPENWOP_GRPC_TLS_KEY": str(tmp_path / "key.pem"),
    }
    live, address = start_grpc(tls_env, var_dir)
    try:
        assert "grpcs://" in live.log()
        credentials = grpc.ssl_channel_credentials(root_certificates=authority.cert_pem.bytes())
        with grpc.secure_channel(address, credentials) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetTask(GetTaskRequest(id="acme/x"), metadata=(("a2a-version", "1.0"),), timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED  # served, over TLS
    finally:
        live.stop()


def test_the_request_rate_limit_answers_resource_exhausted(live_env, transactional_db) -> None:  # type: ignore[no-untyped-def]
    """The same limit as the HTTP bindings, per credential, before authentication decides anything."""
    env, var_dir = live_env
    live, address = start_grpc({**env, "OPENWOP_RATE_LIMIT_REQUESTS": "2"}, var_dir)
    try:
        credential = f"rate-{uuid.uuid4().hex}"
        codes = [asyncio.run(_raw_error(address, credential, GetTaskRequest(id="acme/x"))) for _ in range(3)]
        assert [c.code() for c in codes] == [grpc.StatusCode.UNAUTHENTICATED] * 2 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
        _, _, info = _details(codes[2])
        assert info.reason == "RATE_LIMIT_EXCEEDED" and info.metadata["limit"] == "2"
        assert int(info.metadata["retryAfterSeconds"]) > 0
    finally:
        live.stop()


def test_every_rpc_is_counted_in_metrics(live_env, transactional_db, make_key, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """grpc_serve records each RPC (door `a2a-grpc`, the RPC's name, its outcome); with the
    multi-process directory shared, the web process's /metrics shows them (README "Metrics")."""
    env, var_dir = live_env
    live, address = start_grpc({**env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}, var_dir)
    try:
        key = make_key("acme")

        async def calls() -> None:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                metadata = (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))
                await stub.ListTasks(ListTasksRequest(), metadata=metadata)
                with pytest.raises(grpc.aio.AioRpcError):
                    await stub.GetTask(GetTaskRequest(id="acme~2Fnot-a-task-aaaaaaaaaaaa"), metadata=metadata)

        asyncio.run(calls())
    finally:
        live.stop()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = scraped_in_process()
    listed = (("door", "a2a-grpc"), ("operation", "ListTasks"), ("outcome", "ok"))
    missing = (("door", "a2a-grpc"), ("operation", "GetTask"), ("outcome", "client_error"))
    assert samples[("openwop_requests_total", listed)] == 1
    assert samples[("openwop_requests_total", missing)] == 1
    assert samples[("openwop_request_duration_seconds_count", (("door", "a2a-grpc"), ("operation", "GetTask")))] == 1


async def test_bad_credential_is_unauthenticated(grpc_address: str) -> None:
    refused = await _raw_error(grpc_address, "not-a-key", GetTaskRequest(id="acme/x"))
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _details(refused)[2].reason == "UNAUTHENTICATED"


# --- the card: GRPC only while grpc_serve is configured to run (in-process; no live server) ---


def test_card_lists_no_grpc_unless_configured(acme: Caller) -> None:
    card = DoorClient().get("/.well-known/agent-card.json").json()
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]


@override_settings(OPENWOP_GRPC_ENABLED=True, OPENWOP_GRPC_URL="a2a.example:50051")
def test_configured_grpc_is_on_the_host_and_per_agent_cards(acme: Caller) -> None:
    public = DoorClient().get("/.well-known/agent-card.json").json()
    assert [(i["protocolBinding"], i["url"]) for i in public["supportedInterfaces"]][1:] == [
        ("HTTP+JSON", "http://127.0.0.1:8000/a2a/rest"),
        ("GRPC", "a2a.example:50051"),
    ]
    helper = agent_create(
        tenant=Tenant.objects.get(slug="acme"), actor="test", agent_id="helper", persona="Helper",
        roster=["conformance-noop"], published=True,
    )  # fmt: skip
    r = a2a_tenant_of(agent=helper)
    card = acme.rpc("GetExtendedAgentCard", {"tenant": r}).json()["result"]
    assert card["supportedInterfaces"] == [{**i, "tenant": r} for i in public["supportedInterfaces"]]


@pytest.mark.parametrize("error_type", list(ERROR_ROWS))
def test_every_a2a_error_maps_to_its_grpc_status_with_one_error_info(error_type: type[A2AError]) -> None:
    refused = refused_for_error(error_type())
    row = ERROR_ROWS[error_type]
    assert refused.code == getattr(grpc.StatusCode, row.grpc_status)
    status = status_pb2.Status.FromString(refused.status)
    assert status.code == refused.code.value[0] and status.message == refused.message
    [detail] = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    info = error_details_pb2.ErrorInfo()
    detail.Unpack(info)
    assert (info.reason, info.domain) == (row.reason, "a2a-protocol.org")
