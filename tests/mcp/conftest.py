"""Helpers for MCP mount tests: well-formed 2026-07-28 requests, sent in-process through the door
production serves (tests/door_client.py) or on the wire."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject
from tests.door_client import DoorClient

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
FORM_AND_URL = {"elicitation": {"form": {}, "url": {}}}
NAME_PARAM = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


def rpc(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    id: Any = 1,
    capabilities: dict[str, Any] | None = None,
    version: str = VERSION,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A JSON-RPC request with the per-request `_meta` envelope (overridable, or `meta={}` for none)."""
    params = dict(params or {})
    if meta is None:
        meta = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": capabilities if capabilities is not None else FORM_AND_URL,
        }
    params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def routing_headers(body: dict[str, Any], version: str = VERSION) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": body["method"]}
    name_key = NAME_PARAM.get(body["method"])
    if name_key is not None and name_key in body.get("params", {}):
        headers["Mcp-Name"] = str(body["params"][name_key])
    return headers


@dataclass
class McpCaller:
    """One API key of one tenant and a client posting to /mcp with it through the door."""

    tenant: str
    key: str
    subject: Subject
    client: DoorClient

    def post_raw(self, body: Any, headers: dict[str, str] | None = None, *, auth: bool = True) -> Any:
        sent = dict(headers or {})
        if auth:
            sent.setdefault("Authorization", f"Bearer {self.key}")
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post("/mcp", data=data, content_type="application/json", headers=sent)

    def call(self, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        body = rpc(method, params, **kwargs)
        return self.post_raw(body, routing_headers(body))


@pytest.fixture
def mcp_caller_for(make_key) -> Callable[[str], McpCaller]:  # type: ignore[no-untyped-def]
    def _make(slug: str = "acme") -> McpCaller:
        key = make_key(slug)
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))  # hooks run on commit; `db` never commits
        return McpCaller(tenant=slug, key=key, subject=subject_from_api_key(key), client=DoorClient())

    return _make


@pytest.fixture
def acme(mcp_caller_for) -> McpCaller:  # type: ignore[no-untyped-def]
    return mcp_caller_for("acme")


@pytest.fixture
def globex(mcp_caller_for) -> McpCaller:  # type: ignore[no-untyped-def]
    return mcp_caller_for("globex")
