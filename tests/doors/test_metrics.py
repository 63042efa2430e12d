"""GET /metrics (apps/core/metrics.py, issue 22): the counters move with real traffic on each door of a
live host — REST through openwop-client, A2A through the a2a-sdk client, MCP through the mcp SDK
client — and the endpoint does not exist for an address outside the allowed networks (the same
404 as an unknown path), on the live server and through Django's stack."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest
from django.test import Client, override_settings
from google.protobuf.struct_pb2 import Struct
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest
from prometheus_client.parser import text_string_to_metric_families

from apps.agents.services import workflow_fixtures_seed
from apps.core import metrics
from apps.tenants.models import Tenant
from tests.a2a.live import Session, live_card
from tests.live import start_web
from tests.mcp.sdk_client import mcp_client
from tests.metrics_samples import Samples, samples_of

MCP = "2026-07-28"


def _scrape(base_url: str) -> Samples:
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text[:500]
    assert response.headers["content-type"].startswith("text/plain")
    return samples_of(response.text)


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


@pytest.mark.django_db(transaction=True)
async def test_each_door_moves_its_counters(live_url: str, live_worker: Any, make_key: Any) -> None:
    from asgiref.sync import sync_to_async

    key = await sync_to_async(make_key)("acme")
    await sync_to_async(lambda: workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme")))()
    before = await sync_to_async(_scrape)(live_url)

    # REST: a run created through openwop-client (inline: it completes in the web process).
    rest = OpenwopClient(base_url=live_url, api_key=key, timeout=30)
    await sync_to_async(rest.runs_create)(CreateRunRequest(workflowId="conformance-noop", inputs={}))
    # A2A: a blocking SendMessage through the a2a-sdk client.
    session = Session(await live_card(live_url), "JSONRPC", key)
    try:
        metadata = Struct()
        metadata.update({"openwop": {"skillId": "echo"}})
        message = Message(role=Role.ROLE_USER, message_id=f"metrics-{uuid.uuid4()}", parts=[Part(text="hi")])
        message.metadata.CopyFrom(metadata)
        events = [event async for event in session.client().send_message(SendMessageRequest(message=message))]
        assert events and events[-1].HasField("task")
    finally:
        await session.close()
    # A2A HTTP+JSON: one GetTask and one path that names no operation (raw: the labels, not the client).
    async with httpx.AsyncClient(base_url=live_url, headers={"Authorization": f"Bearer {key}"}) as raw:
        got = await raw.get(f"/a2a/rest/tasks/{events[-1].task.id}", headers={"A2A-Version": "1.0"})
        assert got.status_code == 200, got.text
        assert (await raw.get("/a2a/rest/no-such-operation", headers={"A2A-Version": "1.0"})).status_code == 404
        # A JSON-RPC refusal answered with 200 (-32001, no such task) is the caller's error, not a fault.
        missing = await raw.post(
            "/a2a/jsonrpc", headers={"A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "no-such-task"}},
        )  # fmt: skip
        assert missing.status_code == 200 and missing.json()["error"]["code"] == -32001, missing.text
    # MCP: one tools/call through the mcp SDK client.
    async with mcp_client(live_url, key) as client:
        result = await client.call_tool("conformance-noop", {})
        assert result.is_error is False

    after = await sync_to_async(_scrape)(live_url)
    moved = lambda name, **labels: _moved(before, after, name, **labels)  # noqa: E731
    assert moved("openwop_requests_total", door="rest", operation="POST runs", outcome="ok") == 1
    assert moved("openwop_requests_total", door="a2a", operation="SendMessage", outcome="ok") == 1
    assert moved("openwop_requests_total", door="a2a", operation="GetAgentCard", outcome="ok") == 1
    assert moved("openwop_requests_total", door="a2a", operation="rest:_rest_get", outcome="ok") == 1
    assert moved("openwop_requests_total", door="a2a", operation="other", outcome="client_error") == 1
    assert moved("openwop_requests_total", door="mcp", operation="tools/call", outcome="ok") == 1
    assert moved("openwop_requests_total", door="a2a", operation="GetTask", outcome="client_error") == 1
    assert moved("openwop_requests_total", door="a2a", operation="GetTask", outcome="error") == 0
    for door, operation in (("rest", "POST runs"), ("a2a", "SendMessage"), ("mcp", "tools/call")):
        assert moved("openwop_request_duration_seconds_count", door=door, operation=operation) == 1
        assert moved("openwop_request_duration_seconds_sum", door=door, operation=operation) > 0
    # Every exchange's negotiation.decided, by protocol and the version agreed.
    assert moved("openwop_negotiation_decided_total", protocol="a2a", outcome="accepted", version="1.0") >= 1
    assert moved("openwop_negotiation_decided_total", protocol="mcp", outcome="accepted", version="2026-07-28") >= 1
    # The runs these requests started (the REST and MCP ones ran inline in the web process).
    assert moved("openwop_runs_started_total", transport="rest") == 1
    assert moved("openwop_runs_started_total", transport="mcp") == 1
    assert moved("openwop_runs_finished_total", status="completed", transport="mcp") == 1
    # No tenant, key or run id is ever a label value.
    text = httpx.get(f"{live_url}/metrics", timeout=10).text
    assert "acme" not in text and key not in text
    assert not [line for line in text.splitlines() if not line.startswith("#") and "tenant=" in line]


def test_metrics_refuse_an_address_outside_the_allowed_networks(db: None) -> None:
    client = Client()
    unknown = client.get("/metricz", REMOTE_ADDR="203.0.113.9")
    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert unknown.status_code == refused.status_code == 404
    assert refused.content == unknown.content.replace(b"/metricz", b"/metrics")
    assert refused["Content-Type"] == unknown["Content-Type"]
    assert b"openwop_" not in refused.content
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    with override_settings(OPENWOP_METRICS_ALLOW_CIDRS="203.0.113.0/24"):
        assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 200
        assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404  # the list replaces loopback


@pytest.mark.django_db(transaction=True)
def test_a_live_server_refuses_loopback_when_it_is_not_allowed(live_env: Any) -> None:
    env, var_dir = live_env
    web, base_url = start_web({**env, "OPENWOP_METRICS_ALLOW_CIDRS": "10.0.0.0/8"}, var_dir)
    try:
        refused = httpx.get(f"{base_url}/metrics", timeout=10)
        unknown = httpx.get(f"{base_url}/metricz", timeout=10)
        assert refused.status_code == unknown.status_code == 404
        assert refused.content == unknown.content.replace(b"/metricz", b"/metrics")
    finally:
        web.stop()


def test_the_grafana_dashboard_queries_metrics_the_host_exposes(db: None) -> None:
    """Every `openwop_*` name the shipped dashboard queries is one /metrics serves."""
    import json
    import re
    from pathlib import Path

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "docker/observability/grafana-dashboard.json").read_text()
    )
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"openwop_[a-z_]+", target["expr"])
    }
    served = {
        family.name
        for family in text_string_to_metric_families(Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
    }
    suffixes = ("_bucket", "_total", "_count", "_sum")
    missing = {name for name in queried if name not in served and not any(
        name.endswith(suffix) and name[: -len(suffix)] in served for suffix in suffixes
    )}  # fmt: skip
    assert len(queried) >= 8 and not missing, missing


@pytest.mark.django_db(transaction=True)
def test_open_event_streams_and_pools_are_gauged(live_url: str, live_worker: Any, make_key: Any) -> None:
    """`openwop_sse_streams_open` counts a run's event stream while it is open (the door's fan-out
    path) and not after it ends; the doors' pool is reported once it has been used."""
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    rest = OpenwopClient(base_url=live_url, api_key=key, timeout=30)
    run_id = rest.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 3000})).runId
    baseline = _value(_scrape(live_url), "openwop_sse_streams_open")
    opened, ended = threading.Event(), threading.Event()

    def follow() -> None:
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        with httpx.stream("GET", f"{live_url}/runs/{run_id}/events", headers=headers, timeout=30) as response:
            for line in response.iter_lines():
                opened.set()
                if line.startswith("event: run.completed"):
                    break
        ended.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10)
    during = _scrape(live_url)
    assert _value(during, "openwop_sse_streams_open") == baseline + 1
    assert ended.wait(30)
    after = baseline + 1
    for _ in range(50):  # the server notices the end right after the last frame
        after = _value(_scrape(live_url), "openwop_sse_streams_open")
        if after == baseline:
            break
        time.sleep(0.1)
    assert after == baseline
    pools = {labels for (name, labels) in during if name == "openwop_db_pool_connections"}
    assert (("pool", "doors"), ("state", "idle")) in pools or (("pool", "doors"), ("state", "in_use")) in pools


def test_per_tenant_counts_only_when_the_operator_turns_them_on(door: Any, make_key: Any, settings: Any) -> None:
    """OPENWOP_METRICS_TENANT_LABELS: off, no family names a tenant; on, `openwop_tenant_*` count
    the authenticated caller's requests (on the doors and on REST), runs and negotiations."""
    from prometheus_client import REGISTRY

    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"tenant": "acme", **labels}) or 0.0

    def counts() -> tuple[float, float, float, float]:
        return (
            sample("openwop_tenant_requests_total", door="mcp", outcome="ok"),
            sample("openwop_tenant_requests_total", door="rest", outcome="ok"),
            sample("openwop_tenant_runs_started_total", transport="mcp"),
            sample(
                "openwop_tenant_negotiation_decided_total", protocol="mcp", outcome="accepted", version="2026-07-28"
            ),
        )

    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "conformance-noop", "arguments": {}, "_meta": meta}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": MCP, "Mcp-Method": "tools/call", "Mcp-Name": "conformance-noop"}  # fmt: skip

    def traffic() -> None:
        answered = door.request("POST", "/mcp", json=body, headers=headers).json()
        assert answered["result"]["isError"] is False, answered
        assert Client().get("/runs", headers={"Authorization": f"Bearer {key}"}).status_code == 200

    settings.OPENWOP_METRICS_TENANT_LABELS = False
    before = counts()
    traffic()
    assert counts() == before
    settings.OPENWOP_METRICS_TENANT_LABELS = True
    traffic()
    assert [after - was for after, was in zip(counts(), before, strict=True)] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, b'{"jsonrpc":"2.0","id":1,"result":{"id":"t"}}', "ok"),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Task not found"}}', "client_error"),
        (200, b'{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"bad"}}', "client_error"),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error"}}', "server_error"),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}', "error"),
        (429, b'{"error":{"code":"rate_limited"}}', "client_error"),
        (503, b"", "server_error"),
    ],
)
def test_outcomes_separate_server_faults_from_refusals(status: int, body: bytes, outcome: str) -> None:
    """Issue 51 item 3: a JSON-RPC internal error (a dropped database connection) is a server fault,
    a client's -32001 is a refusal; they no longer share one outcome."""
    assert metrics.outcome_of(status, body) == outcome
