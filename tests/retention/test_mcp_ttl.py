"""An MCP task's `ttlMs` is its tenant's run retention, null under a legal hold (map c.6
`mcp.tasks` ttlMs: null, or not shorter than the host's retention for the run), on the
CreateTaskResult (answered on the event loop) and on tasks/get alike."""

from __future__ import annotations

import pytest

from apps.retention.services import retention_set
from apps.tenants.models import Tenant
from tests.retention.conftest import Doors

pytestmark = pytest.mark.django_db

DAY_MS = 86_400_000


@pytest.fixture(autouse=True)
def _no_task_grace(monkeypatch, settings) -> None:  # type: ignore[no-untyped-def]
    # No worker runs here: the task is answered at once, waiting (tests/mcp/test_tasks_and_mrtr.py).
    monkeypatch.setattr("apps.mcp.tools.TASK_GRACE_SECONDS", 0.0)
    settings.OPENWOP_INLINE_MAX_NODES = 0


def _ttl(doors: Doors, task_id: str) -> object:
    result = doors.mcp("tasks/get", {"taskId": task_id}, name=task_id).json()["result"]  # type: ignore[attr-defined]
    return result["ttlMs"]


def test_task_ttl_is_the_run_retention(doors_for, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RETENTION_RUNS_DAYS = 30
    acme = doors_for("acme")
    created = acme.mcp("tools/call", {"name": "conformance-approval", "arguments": {}}, name="conformance-approval")
    result = created.json()["result"]  # type: ignore[attr-defined]
    assert result["resultType"] == "task" and result["ttlMs"] == 30 * DAY_MS
    task_id = result["taskId"]
    assert _ttl(acme, task_id) == 30 * DAY_MS

    tenant = Tenant.objects.get(slug="acme")
    retention_set(tenant=tenant, runs_days=2, actor="test")
    assert _ttl(acme, task_id) == 2 * DAY_MS
    retention_set(tenant=tenant, legal_hold=True, actor="test")
    assert _ttl(acme, task_id) is None
