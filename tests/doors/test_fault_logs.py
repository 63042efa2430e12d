"""Faults an operator can see (issue 51 item 3): the error line a door writes for a host fault names
the tenant (its slug), the operation and the ids the request named, through the doors' real
route in-process (`door`); the answer on the wire stays the binding's bare internal error.

The fault is injected where the operation runs (a service that raises what no handler maps), the
one thing a test cannot otherwise make happen on demand; everything around it is the real stack.
A second tenant's failing call names that tenant: no request's context reaches another's lines."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from apps.a2a import operations
from apps.core.logformat import JsonFormatter, record_context
from apps.mcp import views as mcp_views
from tests.mcp.conftest import TASKS, routing_headers, rpc

A2A_HEADERS = {"A2A-Version": "1.0"}


def _fault(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the database connection dropped")


def _lines(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == message]


def test_an_a2a_fault_logs_its_tenant_operation_and_task(
    door: Any, make_key: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    keys = {"acme": make_key("acme"), "globex": make_key("globex")}

    async def get_task_doc(*args: Any, **kwargs: Any) -> Any:
        _fault()

    monkeypatch.setattr(operations, "get_task_doc", get_task_doc)
    caplog.set_level(logging.ERROR)
    for slug, key in keys.items():
        body = {"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": f"{slug}/task-17"}}
        answer = door.request(
            "POST", "/a2a/jsonrpc", json=body, headers={**A2A_HEADERS, "Authorization": f"Bearer {key}"}
        )
        error = answer.json()["error"]
        assert (error["code"], error["message"]) == (-32603, "Internal error"), answer.text
        assert "database connection" not in answer.text and "Traceback" not in answer.text

    lines = _lines(caplog, "a2a jsonrpc: unhandled error")
    assert [record_context(line) for line in lines] == [
        {"tenant": "acme", "operation": "GetTask", "taskId": "acme/task-17"},
        {"tenant": "globex", "operation": "GetTask", "taskId": "globex/task-17"},
    ]
    # The JSON format writes them as keys of the line, beside the traceback.
    entry = json.loads(JsonFormatter().format(lines[0]))
    assert (entry["tenant"], entry["operation"], entry["taskId"], entry["exc_type"]) == (
        "acme", "GetTask", "acme/task-17", "RuntimeError",
    )  # fmt: skip
    assert keys["acme"] not in caplog.text and keys["globex"] not in caplog.text


def test_an_a2a_rest_fault_logs_its_operation_and_task(
    door: Any, make_key: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = make_key("acme")

    async def get_task_doc(*args: Any, **kwargs: Any) -> Any:
        _fault()

    monkeypatch.setattr(operations, "get_task_doc", get_task_doc)
    caplog.set_level(logging.ERROR)
    answer = door.request(
        "GET", "/a2a/rest/tasks/acme/task-18", headers={**A2A_HEADERS, "Authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 500, answer.text
    [line] = _lines(caplog, "a2a rest: unhandled error")
    assert record_context(line) == {"tenant": "acme", "operation": "rest:_rest_get", "taskId": "acme/task-18"}


def test_an_mcp_fault_logs_its_tenant_method_and_task(
    door: Any, make_key: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    keys = {"acme": make_key("acme"), "globex": make_key("globex")}

    async def dispatch_begin(exchange: Any, method: str, params: Any) -> Any:
        async def finish() -> Any:
            _fault()

        return finish

    monkeypatch.setattr(mcp_views, "dispatch_begin", dispatch_begin)
    caplog.set_level(logging.ERROR)
    for slug, key in keys.items():
        body = rpc("tasks/get", {"taskId": f"{slug}/task-19"}, capabilities={"extensions": {TASKS: {}}})
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
                   **routing_headers(body)}  # fmt: skip
        answer = door.request("POST", "/mcp", json=body, headers=headers)
        assert answer.json()["error"]["code"] == -32603, answer.text
        assert "database connection" not in answer.text

    lines = _lines(caplog, "MCP request failed")
    assert [record_context(line) for line in lines] == [
        {"tenant": "acme", "operation": "tasks/get", "taskId": "acme/task-19"},
        {"tenant": "globex", "operation": "tasks/get", "taskId": "globex/task-19"},
    ]
