"""Helpers for run tests: seeded tenants with keys, a REST client per key, and the engine driven
in-process (no broker: on_commit callbacks do not fire inside a `db` test's transaction)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.agents.services import workflow_fixtures_seed
from apps.runs.engine import run_advance
from apps.runs.models import Run, RunEvent, RunStatus
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject


@pytest.fixture(autouse=True)
def sent_advances(monkeypatch) -> list[tuple[list[str], str]]:  # type: ignore[no-untyped-def]
    """In-process tests that commit (transactional ones) would publish `runs.advance` from the
    pytest process to its default broker, where no test worker listens: record instead. Live
    servers and workers are other processes and publish for real."""
    from apps.runs import tasks

    sent: list[tuple[list[str], str]] = []
    monkeypatch.setattr(tasks.advance, "apply_async", lambda args, queue: sent.append((args, queue)))
    return sent


@dataclass
class Caller:
    """One API key of one tenant, and a Django test client that sends it."""

    tenant: str
    key: str
    subject: Subject
    client: Client

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers={"Authorization": f"Bearer {self.key}", **headers})

    def post(self, path: str, body: Any = None, **headers: str) -> Any:
        data = "" if body is None else json.dumps(body)
        return self.client.post(
            path, data=data, content_type="application/json", headers={"Authorization": f"Bearer {self.key}", **headers}
        )

    def create_run(self, workflow_id: str, inputs: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"workflowId": workflow_id}
        if inputs is not None:
            body["inputs"] = inputs
        response = self.post("/runs", body)
        assert response.status_code == 201, response.content
        return response.json()["runId"]


@pytest.fixture
def caller_for(make_key) -> Callable[..., Caller]:  # type: ignore[no-untyped-def]
    def _make(slug: str = "acme") -> Caller:
        key = make_key(slug)
        # Tenant hooks run on commit, which a `db` test never reaches: seed explicitly.
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
        return Caller(tenant=slug, key=key, subject=subject_from_api_key(key), client=Client())

    return _make


@pytest.fixture
def acme(caller_for) -> Caller:  # type: ignore[no-untyped-def]
    return caller_for("acme")


@pytest.fixture
def globex(caller_for) -> Caller:  # type: ignore[no-untyped-def]
    return caller_for("globex")


def advance(run_id: str, worker: str = "test-worker") -> Run:
    """Run the executor in-process until the run suspends or ends; returns the fresh row."""
    run_advance(run_id=run_id, worker=worker)
    return Run.unscoped_all_tenants.get(run_id=run_id)


def advance_through_waits(run_id: str, worker: str = "test-worker") -> Run:
    """`advance`, waiting (for real) each time the run parks on the clock until it is due, as a
    worker woken at its wake-up time would: until the run suspends, ends, or is held elsewhere."""
    while True:
        run = advance(run_id, worker)
        now = timezone.now()
        if run.status != RunStatus.RUNNING or run.lease_owner or run.wake_at <= now:
            return run
        time.sleep((run.wake_at - now).total_seconds())


def event_types(run_id: str) -> list[str]:
    return list(
        RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).order_by("sequence").values_list("type", flat=True)
    )


def assert_log_contiguous(run_id: str) -> list[RunEvent]:
    events = list(RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert Run.unscoped_all_tenants.get(run_id=run_id).last_sequence == len(events)
    return events
