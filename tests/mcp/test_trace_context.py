"""interop.md §Trace context on the MCP mount: `_meta.traceparent` preferred over the header, a
malformed value ignored without error, and neither selects a tenant or principal."""

from __future__ import annotations

import pytest

from apps.runs.models import Run
from apps.runs.trace_context import traceparent_valid
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
    assert (run.traceparent, run.tracestate) == (META_PARENT, "vendor=x")


def test_header_is_used_without_meta(acme: McpCaller) -> None:
    run = _call(acme, {}, {"traceparent": HEADER_PARENT})
    assert (run.traceparent, run.tracestate) == (HEADER_PARENT, "")


@pytest.mark.parametrize("bad", ["garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", 42])
def test_malformed_trace_context_is_ignored(acme: McpCaller, bad: object) -> None:
    run = _call(acme, {"traceparent": bad}, {"traceparent": HEADER_PARENT})
    # The in-message value wins even when malformed, and is then ignored: the run mints its own.
    assert traceparent_valid(run.traceparent) and run.traceparent not in (HEADER_PARENT, bad)


def test_trace_carriers_never_select_the_tenant(acme: McpCaller, globex: McpCaller) -> None:
    run = _call(acme, {"traceparent": META_PARENT, "tenant": "globex"}, {"traceparent": HEADER_PARENT})
    assert run.run_id.startswith("acme/") and run.owner["subject"]["subjectId"] == acme.subject.subject_id
