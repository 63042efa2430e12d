"""Helpers for retention tests: one tenant's key asking for a task on every door in-process, and
runs made terminal by hand (no worker: the engine is driven with `run_advance`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.core.ids import project_id
from apps.runs.engine import run_advance
from apps.runs.models import Run
from apps.tenants.models import Tenant
from tests.door_client import DoorClient

MCP_VERSION = "2026-07-28"
MCP_TASKS = "io.modelcontextprotocol/tasks"
MCP_CAPABILITIES = {"elicitation": {"form": {}, "url": {}}, "extensions": {MCP_TASKS: {}}}


@dataclass
class Doors:
    """One API key of one tenant, asking for a run by its id on each door."""

    tenant: str
    key: str
    client: DoorClient

    def _auth(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **extra}

    def a2a_rpc(self, method: str, params: dict) -> object:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return self.client.post(
            "/a2a/jsonrpc", data=body, content_type="application/json", headers=self._auth(**{"A2A-Version": "1.0"})
        )

    def a2a_rest(self, path: str, body: dict | None = None) -> object:
        headers = self._auth(**{"A2A-Version": "1.0"})
        if body is None:
            return self.client.get("/a2a/rest" + path, headers=headers)
        return self.client.post(
            "/a2a/rest" + path, data=json.dumps(body), content_type="application/json", headers=headers
        )

    def mcp(self, method: str, params: dict, name: str | None = None) -> object:
        meta = {
            "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
            "io.modelcontextprotocol/clientCapabilities": MCP_CAPABILITIES,
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        headers = self._auth(**{"MCP-Protocol-Version": MCP_VERSION, "Mcp-Method": method})
        if name is not None:
            headers["Mcp-Name"] = name
        return self.client.post("/mcp", data=json.dumps(body), content_type="application/json", headers=headers)

    def answers(self, run_id: str) -> dict[str, tuple[int, bytes]]:
        """Each door's (status, body bytes) for the run `run_id` (bound form)."""
        task_id = project_id(run_id)
        replies = {
            "a2a jsonrpc GetTask": self.a2a_rpc("GetTask", {"id": run_id}),
            "a2a http+json GET /tasks/{id}": self.a2a_rest(f"/tasks/{task_id}"),
            "mcp tasks/get": self.mcp("tasks/get", {"taskId": task_id}, name=task_id),
            "rest GET /runs/{id}": self.client.get(f"/runs/{task_id}", headers=self._auth()),
            "rest GET /runs/{id}/events/poll": self.client.get(f"/runs/{task_id}/events/poll", headers=self._auth()),
        }
        return {door: (reply.status_code, reply.content) for door, reply in replies.items()}  # type: ignore[attr-defined]


@pytest.fixture
def doors_for(make_key) -> Callable[[str], Doors]:  # type: ignore[no-untyped-def]
    def _make(slug: str = "acme") -> Doors:
        key = make_key(slug)
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))  # hooks run on commit only
        return Doors(tenant=slug, key=key, client=DoorClient())

    return _make


def never_existing(slug: str) -> str:
    """A well-formed run id of `slug` that no run ever had."""
    return f"{slug}/{'Z' * 26}"


def ended_days_ago(run_id: str, days: float, *, now: dt.datetime) -> None:
    """Say the (terminal) run ended `days` before `now`: its end and last touch move back."""
    at = now - dt.timedelta(days=days)
    assert (
        Run.unscoped_all_tenants.filter(run_id=run_id, completed_at__isnull=False).update(
            completed_at=at, updated_at=at
        )
        == 1
    )


def advance(run_id: str) -> Run:
    run_advance(run_id=run_id, worker="test-worker")
    return Run.unscoped_all_tenants.get(run_id=run_id)
