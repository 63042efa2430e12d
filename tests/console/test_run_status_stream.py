"""The console's run-status SSE: each log event with the run's status, ending after the terminal
event; session-authenticated and scoped like every console page (a foreign run is the 404 page)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient

from apps.agents.services import workflow_fixtures_seed
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_create, tenant_get_or_create
from tests.browser.roles import PASSWORD, tenant_user
from tests.runs.conftest import advance, sent_advances  # noqa: F401 - fixture: no broker publish here


def _completed_run(slug: str) -> str:
    tenant = tenant_get_or_create(slug=slug)[0]
    workflow_fixtures_seed(tenant=tenant)
    subject = subject_from_api_key(api_key_create(tenant=Tenant.objects.get(slug=slug))[1])
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    advance(run.run_id)
    return run.run_id


@pytest.mark.usefixtures("transactional_db", "sent_advances")
async def test_status_stream_replays_to_the_terminal_event_and_ends() -> None:
    run_id = await sync_to_async(_completed_run)("acme")
    foreign = await sync_to_async(_completed_run)("globex")
    account = await sync_to_async(tenant_user)("acme")
    client = AsyncClient()
    assert await client.alogin(username=account.username, password=PASSWORD)

    response = await client.get(f"/console/runs/status/{run_id}")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    frames = [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]
    assert frames and frames[-1]["type"] == "run.completed" and frames[-1]["status"] == "completed"
    assert [f["sequence"] for f in frames] == list(range(1, len(frames) + 1))
    assert "event: status" in body
    # The run page asks from the sequence it already shows (?after=): only the later events come.
    later = await client.get(f"/console/runs/status/{run_id}?after=2")
    body = b"".join([chunk async for chunk in later.streaming_content]).decode()
    after = [json.loads(line[len("data: ") :])["sequence"] for line in body.splitlines() if line.startswith("data: ")]
    assert after == [f["sequence"] for f in frames][2:] and after

    unknown = await client.get("/console/runs/status/acme/not-a-run")
    other = await client.get(f"/console/runs/status/{foreign}")
    assert unknown.status_code == other.status_code == 404 and unknown.content == other.content
    anonymous = await AsyncClient().get(f"/console/runs/status/{run_id}")
    assert anonymous.status_code == 404
    await sync_to_async(connections.close_all)()  # the executor thread's connection, or the test DB stays busy
