"""The executor's durability rules (engine.py): leases, the sweeper, idempotent steps."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.agents.services import workflow_create
from apps.runs import engine
from apps.runs.engine import Lease, LeaseLost, run_advance, run_sweep_stale
from apps.runs.log import event_append, run_save
from apps.runs.models import Run, RunEvent, RunStatus
from apps.tenants.models import Tenant
from tests.runs.conftest import Caller, advance, assert_log_contiguous, event_types

pytestmark = pytest.mark.django_db


def _start_node_as_a_worker_that_then_dies(run_id: str) -> RunEvent:
    """What a worker leaves behind when killed mid-node: node.started, and a lease that expired."""
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    lease = engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner="dead-worker")
    assert lease is not None
    work = engine._plan(lease)
    assert work is not None and work.node["kind"] == "delay"
    Run.unscoped_all_tenants.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    return RunEvent.unscoped_all_tenants.get(run=run, type="node.started")


class _FakeClock:
    """The node module's clock and sleep, moved by hand: no real waiting, exact arithmetic.
    `slept`: what nodes slept in the worker thread; `parked`: how far the clock moved while the
    run was parked (`advance_on_clock`), which no thread spends."""

    def __init__(self, now):  # type: ignore[no-untyped-def]
        self.current = now
        self.slept = 0.0
        self.parked = 0.0

    @property
    def waited(self) -> float:
        return self.slept + self.parked

    def now(self):  # type: ignore[no-untyped-def]
        return self.current

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.current += timedelta(seconds=seconds)


def advance_on_clock(run_id: str, clock: _FakeClock) -> Run:
    """Advance the run as workers do on the node module's clock: whenever it parks, the clock
    jumps to its wake-up time (nobody waits) and a worker claims it again."""
    while True:
        run = advance(run_id)
        parked = run.status == RunStatus.RUNNING and not run.lease_owner and run.wake_at > clock.current
        if not parked:
            return run
        clock.parked += (run.wake_at - clock.current).total_seconds()
        clock.current = run.wake_at


@pytest.fixture
def node_clock(monkeypatch):  # type: ignore[no-untyped-def]
    from apps.runs import nodes

    clock = _FakeClock(timezone.now())
    # Replace the node module's references only; the engine and Django keep the real clock.
    monkeypatch.setattr(nodes, "timezone", SimpleNamespace(now=clock.now))
    monkeypatch.setattr(nodes, "time", SimpleNamespace(sleep=clock.sleep, monotonic=time.monotonic))
    return clock


def test_a_live_lease_keeps_other_workers_out(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner="w1") is not None
    run_advance(run_id=run_id, worker="w2")
    assert Run.unscoped_all_tenants.get(run_id=run_id).status == RunStatus.PENDING
    assert event_types(run_id) == ["run.started"]


def test_sweeper_frees_an_expired_lease_and_the_run_resumes_without_rerunning_the_node(
    acme: Caller, django_capture_on_commit_callbacks, node_clock, sent_advances
) -> None:
    run_id = acme.create_run("conformance-delay", {"delayMs": 60_000})
    started = _start_node_as_a_worker_that_then_dies(run_id)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale() == [run_id]
    assert run_sweep_stale() == []  # the lease was freed and the run woken once
    assert sent_advances == [([run_id], Run.unscoped_all_tenants.get(run_id=run_id).queue)]
    # 20 s of the 60 s delay passed before the new worker resumes it: it parks the run until the
    # delay's end measured from the one node.started, the other 40 s, and sleeps none of it.
    node_clock.current = started.at + timedelta(seconds=20)
    parked = advance(run_id, worker="new-worker")
    assert (parked.status, parked.lease_owner) == (RunStatus.RUNNING, "")
    assert parked.wake_at == started.at + timedelta(seconds=60)
    assert node_clock.slept == 0.0
    run = advance_on_clock(run_id, node_clock)
    assert run.status == RunStatus.COMPLETED
    assert node_clock.parked == pytest.approx(40.0, abs=0.01) and node_clock.slept == 0.0
    assert event_types(run_id) == ["run.started", "node.started", "node.completed", "run.completed"]
    assert_log_contiguous(run_id)


def test_a_delay_already_elapsed_when_resumed_does_not_wait_again(acme: Caller, node_clock) -> None:
    run_id = acme.create_run("conformance-delay", {"delayMs": 60_000})
    started = _start_node_as_a_worker_that_then_dies(run_id)
    node_clock.current = started.at + timedelta(seconds=61)
    assert advance(run_id, worker="new-worker").status == RunStatus.COMPLETED
    assert node_clock.slept == 0.0
    assert event_types(run_id).count("node.started") == 1


def test_a_worker_that_lost_its_lease_writes_nothing(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    lease = engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner="slow")
    assert lease is not None
    Run.unscoped_all_tenants.filter(pk=run.pk).update(lease_owner="thief")
    with pytest.raises(LeaseLost):
        lease.renew()
    with pytest.raises(LeaseLost):
        engine._plan(lease)
    assert event_types(run_id) == ["run.started"]


def test_heartbeat_extends_the_lease(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    lease = engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner="w")
    assert isinstance(lease, Lease)
    Run.unscoped_all_tenants.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    lease.renew()
    assert Run.unscoped_all_tenants.get(pk=run.pk).lease_expires_at > timezone.now() + timedelta(seconds=1)


def test_sweeper_resends_a_run_whose_message_was_lost(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    assert run_sweep_stale() == []  # just enqueued: give the broker a chance
    # Created and sent five minutes ago, and claimable ever since: its wake-up was lost.
    five_minutes_ago = timezone.now() - timedelta(minutes=5)
    Run.unscoped_all_tenants.filter(run_id=run_id).update(enqueued_at=five_minutes_ago, wake_at=five_minutes_ago)
    assert run_sweep_stale() == [run_id]


def test_sweeper_leaves_waiting_and_finished_runs_alone(acme: Caller) -> None:
    waiting = acme.create_run("conformance-approval")
    done = acme.create_run("conformance-noop")
    advance(waiting)
    advance(done)
    Run.unscoped_all_tenants.update(enqueued_at=timezone.now() - timedelta(hours=1))
    assert run_sweep_stale() == []


def test_a_node_that_raises_fails_the_run_with_internal_error(acme: Caller, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from apps.core.logformat import record_context
    from apps.runs.nodes import EchoNode

    def boom(self, ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("secret detail")

    monkeypatch.setattr(EchoNode, "execute", boom)
    caplog.set_level(logging.ERROR)
    run_id = acme.create_run("echo")
    run = advance(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error == {"code": "internal_error", "message": "The node failed unexpectedly."}
    # The line names the run's tenant and id (issue 51 item 3): an echo node runs in the request
    # that created the run, whose scope the caller's key gave its tenant.
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"run {run_id}: node ")]
    assert record_context(line).items() >= {"tenant": "acme", "runId": run_id}.items()


def test_a_worker_node_that_raises_logs_its_tenant_and_run(acme: Caller, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """A delay node is a worker's: its failure is logged by the executor, in the run's own scope."""
    from apps.core.logformat import record_context
    from apps.runs.nodes import DelayNode

    def boom(self, ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("secret detail")

    monkeypatch.setattr(DelayNode, "execute", boom)
    run_id = acme.create_run("conformance-delay", {"delayMs": 10})
    caplog.set_level(logging.ERROR)
    assert advance(run_id).status == RunStatus.FAILED
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"run {run_id}: node ")]
    assert record_context(line) == {"tenant": "acme", "operation": "runs.advance", "runId": run_id}
    assert line.name == "apps.runs.engine"


def test_artifact_node_emits_artifact_created(acme: Caller) -> None:
    workflow_create(
        tenant=Tenant.objects.get(slug="acme"),
        workflow_id="report",
        definition={
            "nodes": [
                {"id": "t", "kind": "artifact", "config": {"name": "greeting", "text": "hi {{who}}"}},
                {"id": "d", "kind": "artifact", "config": {"name": "numbers", "data": {"n": "{{n}}"}}},
                {
                    "id": "f",
                    "kind": "artifact",
                    "config": {
                        "name": "file",
                        "file": {"filename": "a.txt", "mediaType": "text/plain", "bytes": "aGk="},
                    },
                },
            ]
        },
        input_schema={"type": "object"},
    )
    run_id = acme.create_run("report", {"who": "Ada", "n": 3})
    assert advance(run_id).status == RunStatus.COMPLETED
    artifacts = list(
        RunEvent.unscoped_all_tenants.filter(run__run_id=run_id, type="artifact.created").order_by("sequence")
    )
    assert [a.payload["parts"] for a in artifacts] == [
        [{"text": "hi Ada"}],
        [{"data": {"n": 3}}],
        [{"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"}],
    ]
    assert [a.node_id for a in artifacts] == ["t", "d", "f"]
    completed = RunEvent.unscoped_all_tenants.get(run__run_id=run_id, type="node.completed", node_id="t")
    assert completed.payload == {"nodeId": "t", "outputs": {"artifactId": artifacts[0].payload["artifactId"]}}


def test_a_workflow_definition_change_does_not_touch_a_run_in_flight(acme: Caller) -> None:
    from apps.agents.models import Workflow

    run_id = acme.create_run("echo", {"x": 1})
    Workflow.unscoped_all_tenants.filter(workflow_id="echo").update(
        definition={"nodes": [{"id": "f", "kind": "fail", "config": {"code": "changed", "message": "changed"}}]}
    )
    assert advance(run_id).status == RunStatus.COMPLETED


def test_sequences_cannot_repeat(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    run.last_sequence = 0  # a writer that forgot where the log is
    with pytest.raises(IntegrityError), transaction.atomic():
        event_append(run=run, type="node.started", payload={}, node_id="noop")
        run_save(run)


def test_the_event_log_refuses_update_and_delete_on_postgresql(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    events = RunEvent.unscoped_all_tenants.filter(run__run_id=run_id)
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        events.update(type="run.failed")
    with pytest.raises(Exception, match="append-only"), transaction.atomic():
        events.delete()
    assert event_types(run_id) == ["run.started"]


def test_a_parked_run_reads_as_a_sleeping_worker_left_it(acme: Caller) -> None:
    """Parking and waking write no event and leave the row's version alone: GET /runs/{id} (and
    its ETag), the A2A status timestamp (`updated_at`) read the same until the node moves on."""
    run_id = acme.create_run("conformance-delay", {"delayMs": 60_000})
    path = f"/runs/{run_id.replace('/', '~2F')}"
    parked = advance(run_id)
    assert (parked.status, parked.lease_owner) == (RunStatus.RUNNING, "") and parked.wake_at > timezone.now()
    before = acme.get(path)
    assert before.json()["status"] == "running" and before.json()["currentNodeId"] == "delay"
    # Claimed again before it is due (an early wake-up): planned, executed, parked again.
    again = advance(run_id, worker="another-worker")
    assert again.wake_at == parked.wake_at and again.updated_at == parked.updated_at
    after = acme.get(path)
    assert after.json() == before.json() and after.headers["ETag"] == before.headers["ETag"]
    assert event_types(run_id) == ["run.started", "node.started"]
