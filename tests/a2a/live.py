"""Helpers for the live a2a-sdk tests (a real uvicorn + Celery worker): the card re-pointed at the
live server, per-principal sdk clients, and database reads from async tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from asgiref.sync import sync_to_async
from django.db import connections
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

T = TypeVar("T")
CARD_PATH = "/.well-known/agent-card.json"


def repointed(card: AgentCard, live_url: str) -> AgentCard:
    """The live server's OPENWOP_PUBLIC_URL is the default origin, not the test port: keep the
    card's interface paths as served, on the live origin."""
    for interface in card.supported_interfaces:
        interface.url = live_url + urlsplit(interface.url).path
    return card


async def live_card(live_url: str) -> AgentCard:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"{live_url}{CARD_PATH}")
    response.raise_for_status()
    return repointed(json_format.ParseDict(response.json(), AgentCard(), ignore_unknown_fields=True), live_url)


async def db_read(read: Callable[[], T]) -> T:
    """A database read from an async test, on a thread whose connection is closed afterwards (an
    idle one left open would keep the test database from being dropped)."""

    def run() -> T:
        try:
            return read()
        finally:
            connections.close_all()

    return await sync_to_async(run, thread_sensitive=False)()


class Session:
    """One principal's sdk clients on one binding: plain (blocking), streaming."""

    def __init__(self, card: AgentCard, binding: str, key: str) -> None:
        self.card, self.binding, self.key = card, binding, key
        self._http: list[httpx.AsyncClient] = []

    def client(self, *, streaming: bool = False) -> Client:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {self.key}"}, timeout=90)
        self._http.append(http)
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=[self.binding], httpx_client=http)
        return ClientFactory(config).create(self.card)

    async def close(self) -> None:
        for http in self._http:
            await http.aclose()


# --- messages and tasks through any binding's a2a-sdk Client (test_live_sdk.py, test_grpc.py) ------

TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}


def user_message(
    *, prefix: str, text: str | None = None, data: Any = None, skill: str | None = None, **fields: Any
) -> Message:
    """A user message with a fresh messageId (`prefix-<uuid>`): text and/or data parts, and the
    OpenWOP skill to route to in its metadata."""
    message = Message(role=Role.ROLE_USER, message_id=f"{prefix}-{uuid.uuid4()}", **fields)
    if text is not None:
        message.parts.append(Part(text=text))
    if data is not None:
        message.parts.append(json_format.ParseDict({"data": data}, Part()))
    if skill is not None:
        metadata = Struct()
        metadata.update({"openwop": {"skillId": skill}})
        message.metadata.CopyFrom(metadata)
    return message


async def send(client: Client, message: Message, *, immediately: bool = False) -> list[StreamResponse]:
    request = SendMessageRequest(message=message)
    if immediately:
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    return [event async for event in client.send_message(request)]


async def only_task(client: Client, message: Message, *, immediately: bool = False) -> Task:
    [event] = await send(client, message, immediately=immediately)
    assert event.HasField("task"), event
    return event.task


async def reattached_until_done(
    streaming: Client, plain: Client, task_id: str, answer: Message
) -> list[StreamResponse]:
    """SubscribeToTask on a task waiting for input: once the current Task has arrived (asserted
    to be INPUT_REQUIRED), `answer` is sent with `plain`; returns every event up to the stream's end."""
    received: list[StreamResponse] = []
    attached = asyncio.Event()

    async def watch() -> None:
        async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
            received.append(event)
            attached.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(attached.wait(), 60)
    assert received[0].HasField("task") and received[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    await only_task(plain, answer)
    await asyncio.wait_for(watcher, 60)
    return received


async def until_terminal(client: Client, task_id: str) -> Task:
    for _ in range(600):
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in TERMINAL:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} did not end")


class _Bearer:
    """`authorization: Bearer <key>` on every call, as a gateway-less gRPC client sends it."""

    def __init__(self, key: str) -> None:
        self.metadata = ("authorization", f"Bearer {key}")

    def with_key(self, details: Any) -> Any:
        return details._replace(metadata=[*(details.metadata or ()), self.metadata])


# Two classes: grpc.aio files an interceptor under the first kind it is an instance of only.
class _BearerUnary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self.with_key(details), request)


class _BearerStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self.with_key(details), request)


def bearer_channel(url: str, key: str) -> grpc.aio.Channel:
    """An insecure gRPC channel to `url` that sends `key` as a Bearer on every call."""
    return grpc.aio.insecure_channel(url, interceptors=[_BearerUnary(key), _BearerStream(key)])
