"""A settled run committed in one statement from the event loop (`run_create_settled`,
`log.run_insert_settled`) is the run `run_create` writes: the same row and the same log, column for
column but for ids and clocks, the tally moved the same way; and what that path does not take (a
run that waits, a run whose events a webhook is owed) it hands back without writing anything, so
`run_create` writes it with its deliveries."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from django.forms.models import model_to_dict

from apps.agents.models import Workflow
from apps.agents.services import workflow_create, workflow_fixtures_seed
from apps.core import async_db
from apps.core.group_commit import writer_of
from apps.push.models import Delivery, Webhook, WebhookEvent
from apps.runs import log
from apps.runs.log import run_insert_settled
from apps.runs.models import Run, RunEvent, RunTally, RunTransport
from apps.runs.services import run_create, run_create_settled, run_draft
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.doors.conftest import Door

ARTIFACT_THEN_ECHO = {
    "nodes": [
        {"id": "text", "kind": "artifact", "config": {"name": "report", "text": "hello"}},
        {"id": "done", "kind": "echo", "config": {"output": {"ok": True, "n": 3}}},
    ]
}
CLOCKS_AND_IDS = {"id", "run_id", "started_at", "completed_at", "updated_at", "created_at", "wake_at", "traceparent"}


def _minted_masked(value: Any) -> Any:
    """Artifact ids are minted per run: equal runs differ there only."""
    if isinstance(value, dict):
        return {k: "<minted>" if k == "artifactId" else _minted_masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_minted_masked(v) for v in value]
    return value


def _row(run: Run) -> dict[str, Any]:
    row = model_to_dict(Run.objects.for_tenant(run.tenant_id).get(pk=run.pk))
    return _minted_masked({k: v for k, v in row.items() if k not in CLOCKS_AND_IDS})


def _log(run: Run) -> list[tuple[Any, ...]]:
    events = RunEvent.objects.for_tenant(run.tenant_id).filter(run_id=run.pk).order_by("sequence")
    return [(e.sequence, e.type, e.node_id, _minted_masked(e.payload)) for e in events]


def _tally(tenant_pk: int) -> dict[str, int]:
    totals: dict[str, int] = {}
    for tally in RunTally.objects.for_tenant(tenant_pk):
        for name in ("runs", "completed", "failed", "pending", "running"):
            totals[name] = totals.get(name, 0) + getattr(tally, name)
    return totals


@pytest.fixture
def acme(door: Door, make_key):  # type: ignore[no-untyped-def]
    subject = subject_from_api_key(make_key("acme"))
    tenant = Tenant.objects.get(slug="acme")
    workflow_fixtures_seed(tenant=tenant)
    workflow_create(tenant=tenant, workflow_id="artifact-echo", definition=ARTIFACT_THEN_ECHO,
                    input_schema={"type": "object"})  # fmt: skip
    return subject


def _workflow(subject: Any, workflow_id: str) -> Workflow:
    return Workflow.objects.for_tenant(subject.tenant_pk).get(workflow_id=workflow_id)


@pytest.mark.parametrize("workflow_id", ["conformance-noop", "artifact-echo", "conformance-failure"])
def test_the_one_statement_run_is_the_orm_run(door: Door, acme: Any, workflow_id: str) -> None:
    workflow = _workflow(acme, workflow_id)
    inputs = {"x": 1}
    before = _tally(acme.tenant_pk)
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    sent = async_db.statements_executed()
    settled = door.run(
        lambda: run_create_settled(
            subject=acme, workflow=workflow, inputs=inputs, transport=RunTransport.MCP, traceparent=traceparent
        )
    )
    assert settled is not None and settled.pk is not None
    # The webhook probe, the row and every event: one statement, so one transaction.
    assert async_db.statements_executed() - sent == 1
    orm = run_create(
        subject=acme, workflow_id=workflow_id, inputs=inputs, transport=RunTransport.MCP, inline=True,
        traceparent=traceparent,
    )  # fmt: skip
    assert _row(settled) == _row(orm)
    assert _row(settled)["status"] in ("completed", "failed")
    assert _log(settled) == _log(orm)
    assert len(_log(settled)) >= 4  # started ... terminal, every event written
    after = _tally(acme.tenant_pk)
    assert after["runs"] == before.get("runs", 0) + 2
    # What the caller holds is what was committed.
    assert settled.status == Run.objects.for_tenant(acme.tenant_pk).get(pk=settled.pk).status


def _columns(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_the_committed_rows_are_the_draft_column_for_column(door: Door, acme: Any) -> None:
    """Each row travels as one JSON document: every column, clocks to the microsecond, ids, JSON
    with non-ASCII text, reads back as the draft in memory had it."""
    draft = run_draft(subject=acme, workflow=_workflow(acme, "artifact-echo"), inputs={"x": ["é", {"y": None}]},
                      transport=RunTransport.MCP, context_id="ctx-1", inline=True)  # fmt: skip
    assert door.run(lambda: run_insert_settled(draft.run, draft.events))
    committed = Run.objects.for_tenant(acme.tenant_pk).get(pk=draft.run.pk)
    assert _columns(committed) == _columns(draft.run)
    assert committed.completed_at is not None and committed.created_at is not None
    events = RunEvent.objects.for_tenant(acme.tenant_pk).filter(run_id=draft.run.pk).order_by("sequence")
    assert [_columns(e) | {"id": None} for e in events] == [_columns(e) | {"id": None} for e in draft.events]


def test_a_run_that_waits_is_left_to_run_create(door: Door, acme: Any) -> None:
    workflow = _workflow(acme, "conformance-approval")
    runs = Run.objects.for_tenant(acme.tenant_pk).count()
    handed_back = door.run(
        lambda: run_create_settled(subject=acme, workflow=workflow, inputs={}, transport=RunTransport.MCP)
    )
    assert handed_back is None
    assert Run.objects.for_tenant(acme.tenant_pk).count() == runs


def test_a_run_owed_to_a_webhook_is_left_to_run_create_with_its_deliveries(door: Door, acme: Any) -> None:
    webhook = Webhook(tenant_id=acme.tenant_pk, webhook_id="wh-settled", url="https://hooks.example/in",
                      events=["run.completed"], secret_sealed=b"x")  # fmt: skip
    webhook.save()
    WebhookEvent(tenant_id=acme.tenant_pk, webhook=webhook, event_type="run.completed").save()
    workflow = _workflow(acme, "conformance-noop")
    runs = Run.objects.for_tenant(acme.tenant_pk).count()
    handed_back = door.run(
        lambda: run_create_settled(subject=acme, workflow=workflow, inputs={}, transport=RunTransport.MCP)
    )
    assert handed_back is None
    assert Run.objects.for_tenant(acme.tenant_pk).count() == runs  # rolled back: nothing written
    run = run_create(subject=acme, workflow_id="conformance-noop", inputs={}, transport=RunTransport.MCP, inline=True)
    assert Delivery.objects.for_tenant(acme.tenant_pk).filter(run=run, event_type="run.completed").count() == 1


def _drafts(subject: Any, workflow_id: str, n: int) -> list[Any]:
    workflow = _workflow(subject, workflow_id)
    return [run_draft(subject=subject, workflow=workflow, inputs={"i": i}, transport=RunTransport.MCP, inline=True)
            for i in range(n)]  # fmt: skip


def _concurrently(door: Door, drafts: list[Any]) -> tuple[list[Any], Any]:
    """Every draft's `run_insert_settled` at once on the door's loop; the outcomes (True, False or
    the exception) and the loop's settled-run writer's stats."""

    async def all_at_once() -> tuple[list[Any], Any]:
        outcomes = await asyncio.gather(*(run_insert_settled(d.run, d.events) for d in drafts), return_exceptions=True)
        return outcomes, writer_of(log._SettledRuns).stats

    return door.run(all_at_once)


def test_concurrent_settled_runs_share_commits_and_each_keeps_its_own_log(door: Door, acme: Any) -> None:
    """Runs of concurrent callers go in together (apps.core.group_commit): fewer commits than runs,
    yet each caller holds its own run, committed whole, with its own events and the tally moved once
    per run."""
    before = _tally(acme.tenant_pk)
    drafts = _drafts(acme, "artifact-echo", 12)
    outcomes, stats = _concurrently(door, drafts)
    assert outcomes == [True] * 12
    assert stats.records == 12 and 1 <= stats.commits < 12, stats
    assert len({d.run.pk for d in drafts}) == 12
    for draft in drafts:
        committed = Run.objects.for_tenant(acme.tenant_pk).get(pk=draft.run.pk)
        assert committed.run_id == draft.run.run_id and committed.inputs == draft.run.inputs
        assert _log(committed) == [(e.sequence, e.type, e.node_id, _minted_masked(e.payload)) for e in draft.events]
    assert _tally(acme.tenant_pk)["runs"] == before.get("runs", 0) + 12


def test_a_run_the_database_refuses_fails_its_own_caller_only(door: Door, acme: Any) -> None:
    """One run of a batch that PostgreSQL refuses (here a value longer than its column) fails its
    caller alone: the batch is written again one run at a time, and the others commit."""
    drafts = _drafts(acme, "conformance-noop", 6)
    drafts[3].run.agent_id = "x" * 129  # agent_id is varchar(128): refused, never cut
    outcomes, _ = _concurrently(door, drafts)
    assert isinstance(outcomes[3], psycopg.errors.StringDataRightTruncation), outcomes
    assert outcomes[:3] + outcomes[4:] == [True] * 5
    written = set(Run.objects.for_tenant(acme.tenant_pk).values_list("run_id", flat=True))
    assert {d.run.run_id for i, d in enumerate(drafts) if i != 3} <= written
    assert drafts[3].run.run_id not in written


def test_in_a_batch_only_the_run_owed_to_a_webhook_is_handed_back(door: Door, acme: Any, make_key) -> None:  # type: ignore[no-untyped-def]
    """The webhook probe is read per run: a tenant's webhook for run.completed hands back that
    tenant's runs (nothing written), while another tenant's runs in the same batch commit."""
    globex = subject_from_api_key(make_key("globex"))
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="globex"))
    webhook = Webhook(tenant_id=acme.tenant_pk, webhook_id="wh-batch", url="https://hooks.example/in",
                      events=["run.completed"], secret_sealed=b"x")  # fmt: skip
    webhook.save()
    WebhookEvent(tenant_id=acme.tenant_pk, webhook=webhook, event_type="run.completed").save()
    owed, free = _drafts(acme, "conformance-noop", 3), _drafts(globex, "conformance-noop", 3)
    outcomes, _ = _concurrently(door, [owed[0], free[0], owed[1], free[1], owed[2], free[2]])
    assert outcomes == [False, True] * 3
    assert not Run.objects.for_tenant(acme.tenant_pk).filter(run_id__in=[d.run.run_id for d in owed]).exists()
    assert Run.objects.for_tenant(globex.tenant_pk).filter(run_id__in=[d.run.run_id for d in free]).count() == 3


def _tools_call_on_door(door: Door, key: str, *, request_id: int) -> Any:
    """An `artifact-echo` tools/call through the MCP door, as a 2026-07-28 client sends it."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "artifact-echo", "arguments": {}, "_meta": meta}}  # fmt: skip
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "artifact-echo",
    }
    return door.request("POST", "/mcp", json=body, headers=headers).json()


def test_tools_call_on_the_door_writes_the_run_from_the_loop(door: Door, acme: Any, make_key) -> None:  # type: ignore[no-untyped-def]
    """Through the MCP door: an instant tool's run is committed in one statement (no thread step
    touched the ORM for it) and is the caller's durable run, readable on the REST wire."""
    answered = _tools_call_on_door(door, make_key("acme"), request_id=5)
    assert answered["result"]["isError"] is False, answered
    run_id = answered["result"]["_meta"]["dev.openwop/runId"]
    run = Run.objects.for_tenant(acme.tenant_pk).get(run_id=run_id)
    assert run.status == "completed" and run.transport == "mcp"
    assert [t for _, t, _, _ in _log(run)][-1] == "run.completed"


def test_a_warm_tools_call_on_the_door_starts_no_thread(door: Door, acme: Any, make_key, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Once the caches are warm, an instant tools/call is answered on the event loop alone: no
    per-request thread executor is created (releasing a connection nobody took used to start one)."""
    import traceback

    import asgiref.sync

    key = make_key("acme")
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "conformance-noop",
    }

    def call(request_id: int) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": "conformance-noop", "arguments": {}, "_meta": meta}}  # fmt: skip
        return door.request("POST", "/mcp", json=body, headers=headers).json()

    from apps.core.invalidation import cache_listening, wait_for

    assert call(1)["result"]["isError"] is False
    # The process caches are in use only while their invalidation listener listens (it starts on
    # the first lookup); a second call then fills every cache the third one reads.
    assert wait_for(cache_listening, 30), "the cache invalidation listener did not start"
    assert call(2)["result"]["isError"] is False
    created: list[object] = []
    real = asgiref.sync.ThreadPoolExecutor

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            created.append("".join(traceback.format_stack(limit=10)))  # where, when it fails
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(asgiref.sync, "ThreadPoolExecutor", Counted)
    answered = call(3)
    assert answered["result"]["isError"] is False, answered
    assert Run.objects.for_tenant(acme.tenant_pk).filter(transport="mcp").count() == 3
    assert created == [], created[0] if created else ""


def test_the_stream_feeds_loop_read_renders_the_threads_frames(door: Door, acme: Any) -> None:
    """The fan-out feed reads a run's log on the loop's pool (apps/runs/views._stream_read_on_loop):
    the very frames, byte for byte, that the same statement on Django's connection renders for a
    stream's replay (JSON and timestamps read alike on both connections)."""
    from apps.runs.views import _stream_read, _stream_read_on_loop

    run = run_create(subject=acme, workflow_id="artifact-echo", inputs={"x": [1, {"y": "é"}]},
                     transport=RunTransport.REST, inline=True)  # fmt: skip
    for after in (0, 2):
        on_loop = door.run(lambda after=after: _stream_read_on_loop(run, after))  # type: ignore[misc]
        assert on_loop == _stream_read(run, after)
        assert [frame.id for frame in on_loop] == list(range(after + 1, run.last_sequence + 1))
    assert on_loop[-1].terminal and b"event: run.completed" in on_loop[-1].data


def test_a_stream_opened_right_after_a_settled_call_gets_every_event(  # type: ignore[no-untyped-def]
    door: Door, acme: Any, make_key, monkeypatch
) -> None:
    """A run committed whole by the one statement wakes nobody (nobody has its id before the
    answer); a stream opened the moment the answer is in reads its whole log from the database."""
    from apps.runs import log

    woken: list[str] = []
    real_wake = log.publish_wake_from_loop

    def wake_seen(group: str) -> None:
        woken.append(group)
        real_wake(group)

    monkeypatch.setattr(log, "publish_wake_from_loop", wake_seen)
    key = make_key("acme")
    answered = _tools_call_on_door(door, key, request_id=9)
    run_id = answered["result"]["_meta"]["dev.openwop/runId"]
    assert woken == []
    streamed = door.request("GET", f"/runs/{run_id.replace('/', '~2F')}/events",
                            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"})  # fmt: skip
    assert streamed.status_code == 200
    frames = [f for f in streamed.text.split("\n\n") if f.strip()]
    ids = [int(line[4:]) for f in frames for line in f.splitlines() if line.startswith("id: ")]
    types = [line[7:] for f in frames for line in f.splitlines() if line.startswith("event: ")]
    run = Run.objects.for_tenant(acme.tenant_pk).get(run_id=run_id)
    assert ids == list(range(1, run.last_sequence + 1))
    assert types == [t for _, t, _, _ in _log(run)] and types[-1] == "run.completed"
