"""Callers for the hardening tests: one key per tenant and raw requests to every door in-process
(the REST wire, A2A JSON-RPC and HTTP+JSON, the MCP mount)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import Tenant
from tests.door_client import DoorClient
from tests.push.conftest import ca, ca_bundle  # noqa: F401 - fixtures
from tests.runs.conftest import acme, caller_for, globex, sent_advances  # noqa: F401 - fixtures

MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}


@dataclass
class Door:
    key: str
    client: DoorClient

    def post(self, path: str, body: bytes | str | Any, **headers: str) -> Any:
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        sent = {"Authorization": f"Bearer {self.key}", "A2A-Version": "1.0", **headers}
        content_type = sent.pop("Content-Type", "application/json")
        return self.client.post(path, data=data, content_type=content_type, headers=sent)

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers={"Authorization": f"Bearer {self.key}", **headers})


@pytest.fixture
def door_for(make_key) -> Callable[[str], Door]:  # type: ignore[no-untyped-def]
    def _make(slug: str = "acme") -> Door:
        key = make_key(slug)
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
        return Door(key=key, client=DoorClient())

    return _make


def a2a_send(message_id: str, request_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"returnImmediately": True},
        },
    }


def mcp_list(request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {"_meta": MCP_META}}


MCP_LIST_HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}


def assert_jsonrpc_error(response: Any, code: int, status: int, request_id: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object (never the OpenWOP envelope, never OpenWOP-Version) with `code`."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}, body
    assert body["id"] == request_id and body["error"]["code"] == code, body
    assert "OpenWOP-Version" not in response.headers
    return body


def a2a_reason(body: dict[str, Any]) -> str:
    """The one ErrorInfo reason of an A2A error (JSON-RPC `error.data` or Status `error.details`)."""
    details = body["error"].get("data") or body["error"].get("details")
    infos = [d for d in details if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1 and infos[0]["domain"] == "a2a-protocol.org", details
    return str(infos[0]["reason"])
