"""State every replica must agree on: a revoked key, a facet edit, a key's rate limit, and the
idempotency of SendMessage retried on another replica."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from openwop_client import OpenwopClient

from tests.cluster.clients import Clients, card_at
from tests.cluster.conftest import RATE_LIMIT, RATE_WINDOW_SECONDS, manage, new_key, unique
from tests.mcp.sdk_client import mcp_client


def _status(url: str, key: str, path: str = "/runs?limit=1") -> int:
    return httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code


async def _mcp_tools(url: str, key: str) -> list[str]:
    async with mcp_client(url, key) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


async def test_a_key_revoked_through_one_replica_is_refused_by_every_other(cluster: Any) -> None:
    key = await asyncio.to_thread(new_key, cluster)
    # Both replicas have the key's Subject cached (DESIGN.md §Caches with honest invalidation):
    # REST twice each, and the MCP mount through the mcp client.
    assert [_status(url, key) for url in cluster.web for _ in range(2)] == [200] * 4
    for url in cluster.web:
        assert "echo" in await _mcp_tools(url, key)
    prefix = key.split("_", 1)[1].split(".", 1)[0]
    await asyncio.to_thread(
        manage, cluster, "shell", "-c",
        "from apps.tenants.models import ApiKey; from apps.tenants.services import api_key_revoke; "
        f"api_key_revoke(api_key=ApiKey.unscoped_all_tenants.get(prefix={prefix!r}))",
    )  # fmt: skip
    # The very next request on each replica, and through the balancer, is refused.
    assert [_status(url, key) for url in [*cluster.web, cluster.lb]] == [401, 401, 401]
    for url in cluster.web:
        with pytest.raises(Exception) as refused:
            await _mcp_tools(url, key)
        assert "credential_revoked" in repr(refused.value), repr(refused.value)
    other = await asyncio.to_thread(new_key, cluster)
    assert [_status(url, other) for url in cluster.web] == [200, 200]


def _mcp_preferred(url: str) -> str:
    """preferredVersion of the MCP facet in this replica's discovery document."""
    return str(httpx.get(f"{url}/.well-known/openwop", timeout=10).json()["mcp"]["preferredVersion"])


def test_a_facet_edit_is_served_by_every_replica(cluster: Any) -> None:
    assert {_mcp_preferred(url) for url in cluster.web} == {"2026-07-28"}  # warm, cached per process
    manage(
        cluster,
        "facet_set",
        "--protocol",
        "mcp",
        "--versions",
        "2026-07-28,2025-11-25",
        "--preferred",
        "2025-11-25",
        "--minimum",
        "2025-11-25",
    )
    try:
        assert [_mcp_preferred(url) for url in cluster.web] == ["2025-11-25", "2025-11-25"]
    finally:
        manage(
            cluster,
            "facet_set",
            "--protocol",
            "mcp",
            "--versions",
            "2026-07-28",
            "--preferred",
            "2026-07-28",
            "--minimum",
            "2026-07-28",
        )
    assert [_mcp_preferred(url) for url in cluster.web] == ["2026-07-28", "2026-07-28"]


def test_the_rate_limit_holds_per_key_across_replicas(cluster: Any) -> None:
    # The window is fixed (epoch multiples of a day): never straddle its end.
    if (left := RATE_WINDOW_SECONDS - time.time() % RATE_WINDOW_SECONDS) < 120:
        time.sleep(left + 1)
    key = new_key(cluster)
    headers = {"Authorization": f"Bearer {key}"}
    clients = [httpx.Client(base_url=url, headers=headers, timeout=30) for url in cluster.web]
    try:
        # Both replicas at once, alternating: the count is shared (one Redis counter per key).
        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(
                pool.map(lambda i: clients[i % 2].get("/runs?limit=1").status_code, range(2 * RATE_LIMIT + 10))
            )
    finally:
        for client in clients:
            client.close()
    assert set(codes) == {200, 429}, set(codes)
    assert codes.count(200) == RATE_LIMIT, (codes.count(200), RATE_LIMIT)
    # Another key has its own budget on both replicas.
    assert [_status(url, new_key(cluster)) for url in cluster.web] == [200, 200]


def _echo(message_id: str) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=message_id)
    message.parts.append(json_format.ParseDict({"data": {"greeting": "once"}}, Part()))
    metadata = Struct()
    metadata.update({"openwop": {"skillId": "echo"}})
    message.metadata.CopyFrom(metadata)
    return SendMessageRequest(message=message)


async def test_send_message_retried_on_the_other_replica_makes_one_run(cluster: Any) -> None:
    tenant = unique("idem")
    key = new_key(cluster, tenant)
    clients = Clients(key)
    message_id = unique("retry")
    try:
        a = clients.http(card_at(cluster.lb, http_origin=cluster.web[0]))
        b = clients.http(card_at(cluster.lb, http_origin=cluster.web[1]))

        async def sent(client: Any) -> str:
            [event] = [e async for e in client.send_message(_echo(message_id))]
            assert event.HasField("task"), event
            return str(event.task.id)

        # The same message at once on both replicas, then once more on each (a client's retries).
        together = await asyncio.gather(sent(a), sent(b))
        retried = [await sent(b), await sent(a)]
    finally:
        await clients.close()
    assert len({*together, *retried}) == 1, (together, retried)
    listed = OpenwopClient(base_url=cluster.lb, api_key=key, timeout=30).runs_list(limit=50)
    assert listed is not None and [r.runId for r in listed.runs] == [together[0]]
