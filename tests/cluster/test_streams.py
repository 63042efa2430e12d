"""Streams across replicas: a stream opened on replica A sees every event, in order, of a task
advanced and cancelled through replica B (REST SSE with openwop-client, A2A streaming over JSON-RPC
and gRPC with the a2a-sdk); and a stream whose replica is SIGKILLed resumes through the balancer
(Last-Event-ID; SubscribeToTask) without missing anything."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from openwop_client import OpenwopClient
from openwop_client.types import CancelRunRequest, CreateRunRequest

from tests.cluster.clients import TERMINAL, Clients, card_at, states, subscribed, wait_until
from tests.cluster.conftest import haproxy_current_sessions, new_key, unique

LONG_WAIT_MS = 60_000


def _rest(url: str, key: str) -> OpenwopClient:
    return OpenwopClient(base_url=url, api_key=key, timeout=30)


def _streamed(client: OpenwopClient, run_id: str, into: list[Any]) -> threading.Thread:
    def read() -> None:
        into.extend(client.runs_events(run_id, timeout_seconds=90))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _assert_the_whole_log(streamed: list[Any], logged: list[Any], last_type: str) -> None:
    assert [(e.sequence, e.type) for e in streamed] == [(e.sequence, e.type) for e in logged]
    assert [e.sequence for e in streamed] == list(range(1, len(streamed) + 1))
    assert streamed[-1].type == last_type


def test_rest_sse_on_a_sees_a_run_advanced_and_cancelled_on_b(cluster: Any) -> None:
    key = new_key(cluster)
    a, b = _rest(cluster.web[0], key), _rest(cluster.web[1], key)
    run_id = b.runs_create(
        CreateRunRequest(workflowId="conformance-cancellable", inputs={"waitMs": LONG_WAIT_MS})
    ).runId
    streamed: list[Any] = []
    reader = _streamed(a, run_id, streamed)
    wait_until(lambda: b.runs_get(run_id).currentNodeId == "wait", "a worker to advance the run into its wait")
    wait_until(lambda: len(streamed) >= 2, "replica A to stream the events written so far")
    b.runs_cancel(run_id, CancelRunRequest(reason="cluster test"))
    reader.join(60)
    assert not reader.is_alive(), "the stream on A did not end with the run"
    _assert_the_whole_log(streamed, b.runs_poll_events(run_id, after_sequence=0).events, "run.cancelled")


def _cancellable(prefix: str) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=unique(prefix))
    message.parts.append(json_format.ParseDict({"data": {"waitMs": LONG_WAIT_MS}}, Part()))
    metadata = Struct()
    metadata.update({"openwop": {"skillId": "conformance-cancellable"}})
    message.metadata.CopyFrom(metadata)
    request = SendMessageRequest(message=message)
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    return request


async def _created(client: Any, prefix: str) -> str:
    [event] = [e async for e in client.send_message(_cancellable(prefix))]
    assert event.HasField("task"), event
    return str(event.task.id)


async def _working(client: Any, task_id: str) -> None:
    for _ in range(600):
        if (await client.get_task(GetTaskRequest(id=task_id))).status.state == TaskState.TASK_STATE_WORKING:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no worker started the task")


@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC"])
async def test_a2a_stream_on_a_sees_a_task_advanced_and_cancelled_on_b(cluster: Any, binding: str) -> None:
    clients = Clients(new_key(cluster))
    try:
        if binding == "GRPC":
            on_a = card_at(cluster.lb, grpc_address=cluster.grpc[0])
            on_b = card_at(cluster.lb, grpc_address=cluster.grpc[1])
            a_stream, b_stream, b = (
                clients.grpc(on_a, streaming=True),
                clients.grpc(on_b, streaming=True),
                clients.grpc(on_b),
            )
        else:
            on_a = card_at(cluster.lb, http_origin=cluster.web[0])
            on_b = card_at(cluster.lb, http_origin=cluster.web[1])
            a_stream, b_stream, b = (
                clients.http(on_a, streaming=True),
                clients.http(on_b, streaming=True),
                clients.http(on_b),
            )
        task_id = await _created(b, "cross")
        await _working(b, task_id)
        # The same task watched from both replicas at once; B is the one the cancel goes through.
        seen_a: list[StreamResponse] = []
        seen_b: list[StreamResponse] = []
        attached_a, attached_b = asyncio.Event(), asyncio.Event()
        watch_a = asyncio.create_task(subscribed(a_stream, task_id, seen_a, attached_a))
        watch_b = asyncio.create_task(subscribed(b_stream, task_id, seen_b, attached_b))
        await asyncio.wait_for(asyncio.gather(attached_a.wait(), attached_b.wait()), 60)
        cancelled = await b.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(asyncio.gather(watch_a, watch_b), 60)
    finally:
        await clients.close()
    assert seen_a[0].HasField("task") and seen_a[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert states(seen_a) == states(seen_b), (seen_a, seen_b)
    assert states(seen_a)[-1] == TaskState.TASK_STATE_CANCELED
    assert [json_format.MessageToDict(e) for e in seen_a[1:]] == [json_format.MessageToDict(e) for e in seen_b[1:]]


def _serving(cluster: Any, backend: str) -> str:
    """The one server of `backend` holding a session (the stream under test)."""

    def one() -> str | None:
        busy = [name for name, count in haproxy_current_sessions(cluster, backend).items() if count]
        return busy[0] if len(busy) == 1 else None

    return str(wait_until(one, f"exactly one {backend} server to hold the stream", timeout=20))


def test_rest_sse_resumes_through_the_balancer_when_its_replica_is_killed(cluster: Any) -> None:
    key = new_key(cluster)
    creator = _rest(cluster.lb, key)
    run_id = creator.runs_create(
        CreateRunRequest(workflowId="conformance-cancellable", inputs={"waitMs": LONG_WAIT_MS})
    ).runId
    wait_until(lambda: creator.runs_get(run_id).currentNodeId == "wait", "a worker to advance the run")
    streamed: list[Any] = []
    reader = _streamed(_rest(cluster.lb, key), run_id, streamed)
    wait_until(lambda: len(streamed) >= 2, "the stream's first events")
    victim = _serving(cluster, "web")
    cluster.procs[victim].stop(kill=True)  # SIGKILL: the stream's connection just breaks
    try:
        # The cancel reaches the surviving replica; the client resubscribes with Last-Event-ID.
        _rest(cluster.lb, key).runs_cancel(run_id, CancelRunRequest(reason="replica killed"))
        reader.join(60)
        assert not reader.is_alive(), "the resumed stream did not end with the run"
        logged = _rest(cluster.lb, key).runs_poll_events(run_id, after_sequence=0).events
        _assert_the_whole_log(streamed, logged, "run.cancelled")
    finally:
        cluster.start_proc(victim)


async def test_grpc_subscribe_to_task_resumes_on_another_replica_after_a_kill(cluster: Any) -> None:
    clients = Clients(new_key(cluster))
    card = card_at(cluster.lb)  # the gRPC interface is the balancer's address (OPENWOP_GRPC_URL)
    assert any(i.url == cluster.grpc_lb for i in card.supported_interfaces if i.protocol_binding == "GRPC")
    victim = None
    try:
        task_id = await _created(clients.http(card), "kill")
        await _working(clients.http(card), task_id)
        first: list[StreamResponse] = []
        attached = asyncio.Event()
        watcher = asyncio.create_task(subscribed(clients.grpc(card, streaming=True), task_id, first, attached))
        await asyncio.wait_for(attached.wait(), 60)
        victim = await asyncio.to_thread(_serving, cluster, "grpc")
        await asyncio.to_thread(cluster.procs[victim].stop, kill=True)
        with pytest.raises((grpc.aio.AioRpcError, Exception)):
            await asyncio.wait_for(watcher, 30)
        # SubscribeToTask again through the balancer: a new connection, the surviving replica.
        again: list[StreamResponse] = []
        reattached = asyncio.Event()
        resumed = asyncio.create_task(subscribed(clients.grpc(card, streaming=True), task_id, again, reattached))
        await asyncio.wait_for(reattached.wait(), 60)
        cancelled = await clients.grpc(card).cancel_task(CancelTaskRequest(id=task_id))
        await asyncio.wait_for(resumed, 60)
    finally:
        await clients.close()
        if victim is not None:
            await asyncio.to_thread(cluster.start_proc, victim)
    assert first[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert again[0].HasField("task") and again[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert states(again)[-1] == TaskState.TASK_STATE_CANCELED == cancelled.status.state
    assert cancelled.status.state in TERMINAL
