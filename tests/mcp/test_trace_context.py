"""interop.md §Trace context on the MCP mount: `_meta.traceparent` preferred over the header, a
malformed value ignored without error, and neither selects a tenant or principal."""

from __future__ import annotations

import pytest

from apps.mcp.models import RunTraceContext
from apps.runs.models import Run
from tests.mcp.conftest import TASKS, McpCaller, routing_headers, rpc

pytestmark = pytest.mark.django_db

META_PARENT = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
HEADER_PARENT = "00-11111111111111111111111111111111-2222222222222222-01"
CAPS = {"extensions": {TASKS: {}}}


def _call(caller: McpCaller, meta_extra: dict, headers: dict) -> Run:  # type: ignore[type-arg]
    body = rpc("tools/call", {"name": "echo", "arguments": {}}, capabilities=CAPS)
    body["params"]["_meta"].update(meta_extra)
    response = caller.post_raw(body, {**routing_headers(body), **headers})
    assert response.status_code == 200, response.content
    return Run.unscoped_all_tenants.get(run_id=response.json()["result"]["_meta"]["dev.openwop/runId"])


def test_meta_wins_over_the_header(acme: McpCaller) -> None:
    run = _call(acme, {"traceparent": META_PARENT, "tracestate": "vendor=x"}, {"traceparent": HEADER_PARENT})
    trace = RunTraceContext.unscoped_all_tenants.get(run=run)
    assert (trace.traceparent, trace.tracestate, trace.source) == (META_PARENT, "vendor=x", "meta")


def test_header_is_used_without_meta(acme: McpCaller) -> None:
    run = _call(acme, {}, {"traceparent": HEADER_PARENT})
    assert RunTraceContext.unscoped_all_tenants.get(run=run).source == "header"


@pytest.mark.parametrize("bad", ["garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", 42])
def test_malformed_trace_context_is_ignored(acme: McpCaller, bad: object) -> None:
    run = _call(acme, {"traceparent": bad}, {"traceparent": HEADER_PARENT})
    assert not RunTraceContext.unscoped_all_tenants.filter(run=run).exists()


def test_trace_carriers_never_select_the_tenant(acme: McpCaller, globex: McpCaller) -> None:
    run = _call(acme, {"traceparent": META_PARENT, "tenant": "globex"}, {"traceparent": HEADER_PARENT})
    assert run.run_id.startswith("acme/") and run.owner["subject"]["subjectId"] == acme.subject.subject_id
