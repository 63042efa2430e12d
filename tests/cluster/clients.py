"""The ecosystem's clients pointed at one replica or at the balancer of a test cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import AgentCard, StreamResponse, SubscribeToTaskRequest, TaskState
from google.protobuf import json_format

from tests.a2a.live import bearer_channel
from tests.cluster.conftest import card_json

TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def card_at(card_source: str, *, http_origin: str | None = None, grpc_address: str | None = None) -> AgentCard:
    """The card as served (through `card_source`), its HTTP interfaces re-pointed at `http_origin`
    and its gRPC interface at `grpc_address`: the same card, one replica chosen."""
    card = json_format.ParseDict(card_json(card_source), AgentCard(), ignore_unknown_fields=True)
    for interface in card.supported_interfaces:
        if interface.protocol_binding == "GRPC":
            if grpc_address:
                interface.url = grpc_address
        elif http_origin:
            interface.url = http_origin + urlsplit(interface.url).path
    return card


class Clients:
    """a2a-sdk clients of one key; `close()` ends their connections."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._http: list[httpx.AsyncClient] = []
        self._channels: list[grpc.aio.Channel] = []

    def http(self, card: AgentCard, *, streaming: bool = False) -> Client:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {self.key}"}, timeout=90)
        self._http.append(http)
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=["JSONRPC"], httpx_client=http)
        return ClientFactory(config).create(card)

    def grpc(self, card: AgentCard, *, streaming: bool = False) -> Client:
        def channel(url: str) -> grpc.aio.Channel:
            made = bearer_channel(url, self.key)
            self._channels.append(made)
            return made

        config = ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"], grpc_channel_factory=channel)
        return ClientFactory(config).create(card)

    async def close(self) -> None:
        for http in self._http:
            await http.aclose()
        for channel in self._channels:
            await channel.close()


async def subscribed(client: Client, task_id: str, received: list[StreamResponse], attached: asyncio.Event) -> None:
    async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
        received.append(event)
        attached.set()


def states(events: list[StreamResponse]) -> list[int]:
    out = []
    for event in events:
        if event.HasField("task"):
            out.append(event.task.status.state)
        elif event.HasField("status_update"):
            out.append(event.status_update.status.state)
    return out
