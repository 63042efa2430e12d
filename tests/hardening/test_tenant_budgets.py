"""Tenant budgets on the request path (issue 49 items 2 and 3), on a real uvicorn and grpc_serve.

A tenant's requests are counted over all of its keys beside each key's own window; past its
budget (its TenantBudget row here) every key of the tenant is refused in its door's own wire,
with Retry-After and the budget named, while another tenant is served: REST (429 envelope), A2A
JSON-RPC (a2a-sdk; -32000 RATE_LIMIT_EXCEEDED), A2A gRPC (RESOURCE_EXHAUSTED), MCP (mcp client;
-32000 rate_limited). Open streams are capped per tenant across its keys the same way. A refused
request is refused before the database (the tenant tables locked, it still answers 429 at once),
before its body is parsed (malformed JSON is 429, not 400) and, on the doors, before its body is
read at all (headers alone are answered). The refusals are counted per tenant in /metrics.

A key's tenant is known from the per-process cache once that key authenticated there, so each
key's first request in a process is limited per key only: the loops below refuse within a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import ListTasksRequest, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2
from mcp import MCPError

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import Tenant, TenantBudget
from tests.a2a.live import Session, live_card
from tests.live import start_grpc, start_web
from tests.mcp.sdk_client import mcp_client
from tests.metrics_samples import samples_of

BUDGET = 4
BOUND = 40  # requests before the budget must have refused (BUDGET + each key's first, uncounted)
TENANT_RPM = "tenant_requests_per_minute"


@pytest.fixture(scope="module")
def budget_host(_live_env, tmp_path_factory) -> Iterator[tuple[str, str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    """(web base URL, gRPC address, env): no window boundary inside the test, host defaults unhit."""
    env, _ = _live_env
    env = {
        **env,
        "OPENWOP_RATE_LIMIT_WINDOW_SECONDS": "86400",
        "OPENWOP_TENANT_REQUESTS_PER_MINUTE": "100000",
        "OPENWOP_TENANT_STREAMS": "1000",
    }
    log_dir = tmp_path_factory.mktemp("tenant-budgets")
    web, base_url = start_web(env, log_dir)
    grpc_live, address = start_grpc(env, log_dir)
    yield base_url, address, env
    grpc_live.stop()
    web.stop()


def _tenant(make_key, *, keys: int = 2, requests: int | None = None, streams: int | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """A fresh tenant (its own counters) with `keys` keys and its own budget row (its slug: SLUGS)."""
    slug = f"bud-{uuid.uuid4().hex[:10]}"
    made = [make_key(slug) for _ in range(keys)]
    tenant = Tenant.objects.get(slug=slug)
    TenantBudget.objects.create(tenant=tenant, requests_per_minute=requests, streams=streams)
    workflow_fixtures_seed(tenant=tenant)
    SLUGS[made[0]] = slug
    return made


SLUGS: dict[str, str] = {}  # a made tenant's first key -> its slug


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _until_refused(call: Callable[[str], bool], keys: list[str]) -> int:
    """Call with the keys in turn until one is refused (`call` False); how many were admitted."""
    for sent in range(BOUND):
        if not call(keys[sent % len(keys)]):
            assert sent >= BUDGET, f"refused after {sent} requests, under the budget of {BUDGET}"
            return sent
    raise AssertionError(f"the tenant budget of {BUDGET} never refused in {BOUND} requests")


def _rest_admitted(base: str) -> Callable[[str], bool]:
    def call(key: str) -> bool:
        answer = httpx.get(f"{base}/runs", headers=_auth(key), timeout=10)
        assert answer.status_code in (200, 429), answer.text
        return answer.status_code == 200

    return call


def _assert_rest_budget_refusal(answer: httpx.Response, budget: str = TENANT_RPM) -> None:
    assert answer.status_code == 429, answer.text
    body = answer.json()
    assert body["error"] == "rate_limited" and body["details"]["budget"] == budget, body
    assert int(answer.headers["Retry-After"]) >= 1


def test_rest_tenant_budget_spans_its_keys_and_spares_other_tenants(budget_host, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    base, _, _ = budget_host
    keys = _tenant(make_key, requests=BUDGET)
    (other,) = _tenant(make_key, keys=1)
    _until_refused(_rest_admitted(base), keys)
    for key in keys:  # every key of the tenant, each far under its own 1,200
        refused = httpx.get(f"{base}/runs", headers=_auth(key), timeout=10)
        _assert_rest_budget_refusal(refused)
        assert refused.json()["details"]["limit"] == BUDGET
    for _ in range(BUDGET + 2):  # the other tenant is served
        assert httpx.get(f"{base}/runs", headers=_auth(other), timeout=10).status_code == 200

    slug = SLUGS[keys[0]]
    scraped = samples_of(httpx.get(f"{base}/metrics", timeout=10).text)
    counted = scraped.get(("openwop_tenant_budget_refusals_total", (("budget", TENANT_RPM), ("tenant", slug))), 0)
    assert counted >= 3


def test_a_refused_request_reads_no_body_and_no_table(budget_host, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    """Item 3: with the tenants' tables locked, an authentication (or a budget read) would wait
    for the lock; the refused requests answer at once. A malformed body is not parsed (429, not
    400), and the door answers a request whose declared body never comes."""
    base, _, env = budget_host
    keys = _tenant(make_key, requests=BUDGET)
    _until_refused(_rest_admitted(base), keys)

    with psycopg.connect(env["DATABASE_URL"], autocommit=False) as locker:
        locker.execute("SET lock_timeout = '5s'")
        locker.execute("LOCK TABLE tenants_apikey, tenants_tenant, tenants_tenantbudget IN ACCESS EXCLUSIVE MODE")
        try:
            malformed = httpx.post(
                f"{base}/runs", content=b'{"workflowId": ', timeout=10,
                headers={**_auth(keys[0]), "Content-Type": "application/json"},
            )  # fmt: skip
            _assert_rest_budget_refusal(malformed)
            assert httpx.get(f"{base}/runs", headers=_auth(keys[1]), timeout=10).status_code == 429

            host, port = base.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=10) as raw:
                raw.sendall(
                    b"POST /a2a/rest/message:send HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + f"Authorization: Bearer {keys[0]}\r\n".encode()
                    + b"A2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                )  # the 5,000 bytes are never sent
                head = raw.recv(65536).decode("latin-1")
            assert head.startswith("HTTP/1.1 429"), head
            body = json.loads(head.split("\r\n\r\n", 1)[1])
            assert body["error"]["status"] == "RESOURCE_EXHAUSTED"
            assert body["error"]["details"][0]["metadata"]["budget"] == TENANT_RPM
        finally:
            locker.rollback()


async def test_a2a_jsonrpc_and_grpc_refuse_past_the_tenant_budget(budget_host, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    base, address, _ = budget_host
    keys = await asyncio.to_thread(_tenant, make_key, requests=BUDGET)
    (other,) = await asyncio.to_thread(_tenant, make_key, keys=1)
    card = await live_card(base)
    sessions = {key: Session(card, "JSONRPC", key) for key in [*keys, other]}
    clients = {key: session.client() for key, session in sessions.items()}
    try:
        refused_with: list[A2AClientError] = []
        for sent in range(BOUND):
            try:
                await clients[keys[sent % 2]].list_tasks(ListTasksRequest())
            except A2AClientError as exc:
                refused_with.append(exc)
                break
        assert refused_with and "429" in str(refused_with[0]), refused_with
        assert sent >= BUDGET
        await clients[other].list_tasks(ListTasksRequest())  # another tenant is served

        rpc = {"jsonrpc": "2.0", "id": "b-1", "method": "ListTasks", "params": {}}
        async with httpx.AsyncClient(timeout=10) as http:
            raw = await http.post(f"{base}/a2a/jsonrpc", json=rpc, headers={**_auth(keys[1]), "A2A-Version": "1.0"})
        assert raw.status_code == 429 and int(raw.headers["Retry-After"]) >= 1
        error = raw.json()["error"]
        assert raw.json()["id"] == "b-1" and error["code"] == -32000
        info = error["data"][0]
        assert info["reason"] == "RATE_LIMIT_EXCEEDED" and info["metadata"]["budget"] == TENANT_RPM
    finally:
        for session in sessions.values():
            await session.close()

    # gRPC: its own process learns the keys on their first RPC, then counts the tenant.
    grpc_keys = await asyncio.to_thread(_tenant, make_key, requests=BUDGET)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        async def listed(key: str) -> grpc.aio.AioRpcError | None:
            try:
                metadata = (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))
                await stub.ListTasks(ListTasksRequest(), metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                return exc
            return None

        for sent in range(BOUND):
            failure = await listed(grpc_keys[sent % 2])
            if failure is not None:
                break
        assert failure is not None and sent >= BUDGET
        assert failure.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, failure
        status = status_pb2.Status.FromString(dict(failure.trailing_metadata() or ())["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        assert info.reason == "RATE_LIMIT_EXCEEDED" and info.metadata["budget"] == TENANT_RPM
        assert int(info.metadata["retryAfterSeconds"]) >= 1
        assert await listed(other) is None  # another tenant is served


async def test_mcp_refuses_past_the_tenant_budget(budget_host, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    base, _, _ = budget_host
    keys = await asyncio.to_thread(_tenant, make_key, requests=BUDGET)
    (other,) = await asyncio.to_thread(_tenant, make_key, keys=1)
    refused: MCPError | None = None
    async with mcp_client(base, keys[0]) as first, mcp_client(base, keys[1]) as second:
        for sent in range(BOUND):
            try:
                await (first, second)[sent % 2].list_tools(cache_mode="bypass")
            except MCPError as exc:
                refused = exc
                break
    assert refused is not None and sent >= BUDGET
    assert refused.error.code == -32000, refused.error
    data: Any = refused.error.data
    assert data["reason"] == "rate_limited" and data["budget"] == TENANT_RPM
    async with mcp_client(base, other) as served:
        assert (await served.list_tools()).tools

    rpc = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}
    headers = {**_auth(keys[0]), "MCP-Protocol-Version": "2026-07-28", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=10) as http:
        raw = await http.post(f"{base}/mcp", json=rpc, headers=headers)
    assert raw.status_code == 429 and int(raw.headers["Retry-After"]) >= 1 and raw.json()["id"] == 9


def test_tenant_streams_are_capped_across_its_keys(budget_host, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    base, _, _ = budget_host
    keys = _tenant(make_key, streams=1)
    (other,) = _tenant(make_key, keys=1)
    for key in [*keys, other]:  # each key authenticates once here: its tenant is then known
        assert httpx.get(f"{base}/runs", headers=_auth(key), timeout=10).status_code == 200

    def stream_of(key: str) -> contextlib.AbstractContextManager[httpx.Response]:
        run = httpx.post(f"{base}/runs", json={"workflowId": "conformance-approval"}, headers=_auth(key), timeout=10)
        assert run.status_code == 201, run.text
        url = f"{base}/runs/{run.json()['runId'].replace('/', '~2F')}/events"
        return httpx.stream("GET", url, headers=_auth(key), timeout=30)

    with stream_of(keys[0]) as first:
        assert first.status_code == 200
        with stream_of(keys[1]) as second:  # another key of the same tenant, under its own ceiling
            assert second.status_code == 429
            second.read()
            _assert_rest_budget_refusal(second, "tenant_streams")
        with stream_of(other) as others:
            assert others.status_code == 200
