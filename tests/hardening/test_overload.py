"""A saturated host answers 503 + Retry-After in each door's wire, never a 500 (apps/core/overload.py).

Saturation made real, not simulated: a uvicorn whose pool holds ONE connection (timeout 1 s); the
test locks the API-key table from its own PostgreSQL session, so a first request takes that one
connection and blocks on the lock. Every other request then waits for the pool and times out:
A2A JSON-RPC, A2A HTTP+JSON, MCP and the REST wire must each answer 503 with Retry-After in its
own error shape (raw httpx: the status and headers are the point). Once the lock goes the first
request completes normally, and so does the next one.
"""

from __future__ import annotations

import threading

import httpx
import psycopg
from django.db import connection

from apps.tenants.models import ApiKey
from tests.live import pooled_env, start_grpc, start_web, wait_until

A2A = {"A2A-Version": "1.0", "Content-Type": "application/json"}
MCP_VERSION = "2026-07-28"


def _mcp_body() -> dict:  # type: ignore[type-arg]
    meta = {
        "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": meta}}


def _sessions_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def _api_keys_locked() -> psycopg.Connection:  # type: ignore[type-arg]
    """A session of the test's own holding the API-key table locked until it commits."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    locker = psycopg.connect(**params, autocommit=False)
    with locker.cursor() as cursor:
        cursor.execute(f'LOCK TABLE "{ApiKey._meta.db_table}" IN ACCESS EXCLUSIVE MODE')
    return locker


def test_a_saturated_pool_answers_503_with_retry_after_on_every_door(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    own_env = pooled_env(env, size=1, timeout=1)
    web, base_url = start_web(own_env, var_dir)
    key, other_tenant_key = make_key("acme"), make_key("globex")
    auth = {"Authorization": f"Bearer {key}"}
    locker = _api_keys_locked()
    try:
        holder: dict[str, httpx.Response] = {}

        def hold() -> None:  # takes the pool's one connection and waits on the lock
            holder["response"] = httpx.get(f"{base_url}/host/openwop-host/api/whoami", headers=auth, timeout=60)

        first = threading.Thread(target=hold)
        first.start()
        # The first request holds the pool's connection once its query waits on our lock.
        wait_until(lambda: _sessions_waiting_on_a_lock() == 1, "the first request waiting on the lock", timeout=30)
        with httpx.Client(base_url=base_url, timeout=30) as client:
            rpc = {"jsonrpc": "2.0", "id": "g1", "method": "GetTask", "params": {"id": "acme/none"}}
            jsonrpc = client.post("/a2a/jsonrpc", json=rpc, headers={**A2A, **auth})
            assert jsonrpc.status_code == 503, jsonrpc.text
            assert jsonrpc.headers["Retry-After"] == "1"
            error = jsonrpc.json()
            assert error["id"] == "g1" and error["error"]["code"] == -32603
            assert error["error"]["data"][0]["reason"] == "INTERNAL_ERROR"

            rest = client.get("/a2a/rest/tasks/acme~2Fnone", headers={**A2A, **auth})
            assert rest.status_code == 503 and rest.headers["Retry-After"] == "1", rest.text
            assert rest.json()["error"]["status"] == "UNAVAILABLE"

            mcp = client.post(
                "/mcp",
                json=_mcp_body(),
                headers={
                    **auth, "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": MCP_VERSION, "Mcp-Method": "tools/list",
                },
            )  # fmt: skip
            assert mcp.status_code == 503 and mcp.headers["Retry-After"] == "1", mcp.text
            assert mcp.json()["id"] == 7 and mcp.json()["error"]["data"] == {"reason": "overloaded"}

            # Another tenant's key meets the same saturation, not some other answer.
            wire = client.get("/host/openwop-host/api/whoami", headers={"Authorization": f"Bearer {other_tenant_key}"})
            assert wire.status_code == 503 and wire.headers["Retry-After"] == "1", wire.text
            assert wire.json()["error"] == "openwop-host.overloaded"
        locker.commit()  # the lock goes: the waiting request and everything after it proceed
        first.join(timeout=60)
        assert holder["response"].status_code == 200, holder["response"].text
        after = httpx.get(f"{base_url}/host/openwop-host/api/whoami", headers=auth, timeout=30)
        assert after.status_code == 200 and after.json()["subject"]["tenant"] == "acme", after.text
        assert "Traceback" not in web.log()
    finally:
        locker.close()
        web.stop()


def test_a_saturated_grpc_server_answers_unavailable_with_retry_after(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    """The gRPC binding in the same saturation: UNAVAILABLE, one ErrorInfo, retryAfterSeconds."""
    import asyncio

    import grpc
    from a2a.types import GetTaskRequest, a2a_pb2_grpc
    from google.rpc import error_details_pb2, status_pb2

    env, var_dir = live_env
    live, address = start_grpc(pooled_env(env, size=1, timeout=1), var_dir)
    key = make_key("acme")
    metadata = (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))

    async def get_task() -> grpc.aio.AioRpcError | None:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(GetTaskRequest(id="acme/none"), metadata=metadata)
            except grpc.aio.AioRpcError as error:
                return error
        return None

    locker = _api_keys_locked()
    try:
        holder: dict[str, grpc.aio.AioRpcError | None] = {}
        first = threading.Thread(target=lambda: holder.update(error=asyncio.run(get_task())))
        first.start()
        wait_until(lambda: _sessions_waiting_on_a_lock() == 1, "the first RPC waiting on the lock", timeout=30)
        refused = asyncio.run(get_task())
        assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE, refused
        status = status_pb2.Status.FromString(dict(refused.trailing_metadata())["grpc-status-details-bin"])
        [detail] = status.details
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info) and info.reason == "INTERNAL_ERROR"
        assert info.metadata["retryAfterSeconds"] == "1"
        locker.commit()  # the lock goes: the waiting RPC completes with its own answer (no such task)
        first.join(timeout=60)
        assert holder["error"] is not None and holder["error"].code() == grpc.StatusCode.NOT_FOUND
        assert "Traceback" not in live.log()
    finally:
        locker.close()
        live.stop()
