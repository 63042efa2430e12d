"""A short run is one transaction (`run_create(..., inline=True)`, steps.draft_settle): a door
that waits for a run has its instant nodes run in its own process and the run committed once,
settled; the first node a worker must run is handed to the queue before it starts, and nothing is
left that a worker or the sweeper could not pick up. In-process on the real database;
`sent_advances` records the Celery messages (conftest), `django_capture_on_commit_callbacks`
makes a `db` test's on_commit fire."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from apps.agents.services import workflow_create
from apps.runs import steps
from apps.runs.engine import run_sweep_stale
from apps.runs.models import Interrupt, Run, RunEvent, RunStatus
from apps.runs.nodes import NODE_KINDS, EchoNode
from apps.runs.services import interrupt_resolve, run_create
from apps.tenants.models import Tenant
from tests.a2a.live import db_read
from tests.runs.conftest import Caller, advance, assert_log_contiguous, event_types

pytestmark = pytest.mark.django_db


def _workflow(caller: Caller, workflow_id: str, nodes: list[dict[str, Any]]) -> str:
    workflow_create(
        tenant=Tenant.objects.get(slug=caller.tenant),
        workflow_id=workflow_id,
        definition={"nodes": nodes},
        input_schema={"type": "object"},
    )
    return workflow_id


def _echo(node_id: str) -> dict[str, Any]:
    return {"id": node_id, "kind": "echo", "config": {"output": {"node": node_id}}}


def _create_inline(caller: Caller, workflow_id: str, capture: Any, inputs: dict[str, Any] | None = None) -> Run:
    """What a waiting door does: create with `inline`, on-commit hooks firing."""
    with capture(execute=True):
        run = run_create(subject=caller.subject, workflow_id=workflow_id, inputs=inputs, transport="a2a", inline=True)
    return run


def _fresh(run: Run) -> Run:
    return Run.unscoped_all_tenants.get(pk=run.pk)


def test_kinds_that_wait_or_call_out_are_not_inline_safe() -> None:
    assert {kind for kind, node in NODE_KINDS.items() if node.inline_safe} == {
        "echo",
        "fail",
        "artifact",
        "approval",
        "input",
        "credential",
        "log",
        "sampling",
        "roots",
        "host-fault",  # return (or raise) at once; ask nobody outside
        "parallel",  # runs only instant branches: it refuses any other kind
    }


def test_an_instant_run_completes_inline_and_sends_no_message(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks, {"text": "hi"})
    assert run.status == RunStatus.COMPLETED  # returned settled...
    done = _fresh(run)
    assert done.status == RunStatus.COMPLETED and done.outputs == {"text": "hi"}  # ...as committed
    assert done.lease_owner == "" and done.lease_expires_at is None and done.completed_at is not None
    assert event_types(run.run_id) == ["run.started", "node.started", "node.completed", "run.completed"]
    assert sent_advances == []  # no Celery round trip at all
    assert_log_contiguous(run.run_id)


def test_a_node_that_waits_is_handed_to_the_queue_before_it_starts(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    workflow_id = _workflow(acme, "echo-then-delay", [_echo("first"), {"id": "wait", "kind": "delay", "config": {}}])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    handed = _fresh(run)
    assert handed.status == RunStatus.RUNNING and handed.node_index == 1
    assert handed.lease_owner == "" and handed.lease_expires_at is None  # a worker can claim it at once
    assert handed.enqueued_at is not None  # the sweeper's safety net, should the message be lost
    assert event_types(run.run_id) == ["run.started", "node.started", "node.completed"]  # delay not started
    assert sent_advances == [([run.run_id], handed.queue)]
    # The worker that message reaches finishes it.
    assert advance(run.run_id, worker="celery-worker").status == RunStatus.COMPLETED
    assert event_types(run.run_id)[-3:] == ["node.started", "node.completed", "run.completed"]
    assert_log_contiguous(run.run_id)


def test_a_first_node_that_waits_leaves_the_run_pending_for_the_queue(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    run = _create_inline(acme, "conformance-delay", django_capture_on_commit_callbacks, {"delayMs": 0})
    assert _fresh(run).status == RunStatus.PENDING and event_types(run.run_id) == ["run.started"]
    assert sent_advances == [([run.run_id], run.queue)]


def test_the_node_budget_bounds_an_inline_advance(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, settings
) -> None:
    settings.OPENWOP_INLINE_MAX_NODES = 2
    workflow_id = _workflow(acme, "three-echoes", [_echo("a"), _echo("b"), _echo("c")])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    assert _fresh(run).node_index == 2 and _fresh(run).lease_owner == ""
    assert event_types(run.run_id).count("node.completed") == 2
    assert sent_advances == [([run.run_id], run.queue)]
    assert advance(run.run_id).status == RunStatus.COMPLETED


def test_zero_nodes_restores_the_queue(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, settings
) -> None:
    settings.OPENWOP_INLINE_MAX_NODES = 0
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks)
    assert sent_advances == [([run.run_id], run.queue)]  # enqueued on commit, as without `inline`
    assert _fresh(run).status == RunStatus.PENDING and _fresh(run).lease_owner == ""
    assert event_types(run.run_id) == ["run.started"]


def test_a_suspension_is_reached_inline(acme: Caller, django_capture_on_commit_callbacks, sent_advances) -> None:
    run = _create_inline(acme, "conformance-approval", django_capture_on_commit_callbacks)
    waiting = _fresh(run)
    assert waiting.status == RunStatus.WAITING_APPROVAL and waiting.lease_owner == ""
    assert waiting.current_node_id == "approve"
    assert event_types(run.run_id) == ["run.started", "node.started", "interrupt.requested", "node.suspended"]
    interrupt = Interrupt.unscoped_all_tenants.get(run=run)
    suspended = RunEvent.unscoped_all_tenants.get(run=run, type="node.suspended")
    assert suspended.payload == {"nodeId": "approve", "interruptId": interrupt.interrupt_id, "kind": "approval"}
    assert sent_advances == []
    assert_log_contiguous(run.run_id)


@pytest.mark.parametrize(("action", "status"), [("accept", RunStatus.COMPLETED), ("reject", RunStatus.FAILED)])
def test_a_resume_runs_the_instant_tail_in_its_transaction(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, action: str, status: str
) -> None:
    run = _create_inline(acme, "conformance-approval", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        resumed = interrupt_resolve(
            subject=acme.subject, run_id=run.run_id, node_id="approve", resume_value={"action": action}, inline=True
        )
    assert resumed.status == status and _fresh(run).status == status
    tail = ["interrupt.resolved", "node.completed", "run.completed"]
    if action == "reject":
        tail = ["interrupt.resolved", "node.failed", "run.failed"]
    assert event_types(run.run_id)[4:] == tail  # the resumed node is not started twice
    assert sent_advances == []
    assert_log_contiguous(run.run_id)


def test_the_same_workflow_plans_the_same_events_inline_and_on_a_worker(
    acme: Caller, django_capture_on_commit_callbacks, settings
) -> None:
    workflow_id = _workflow(
        acme,
        "mixed",
        [_echo("a"), {"id": "art", "kind": "artifact", "config": {"name": "n", "text": "t"}}, _echo("b")],
    )
    inline = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks, {"x": 1})
    settings.OPENWOP_INLINE_MAX_NODES = 0
    queued = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks, {"x": 1})
    worked = advance(queued.run_id)

    def shape(run_id: str) -> list[tuple[str, str, int]]:
        return list(
            RunEvent.unscoped_all_tenants.filter(run__run_id=run_id)
            .order_by("sequence")
            .values_list("type", "node_id", "sequence")
        )

    assert shape(inline.run_id) == shape(queued.run_id)
    fresh = _fresh(inline)
    assert (fresh.status, fresh.outputs) == (worked.status, worked.outputs)
    assert fresh.variables.keys() == worked.variables.keys()  # artifact ids are minted per run


def test_a_handed_off_run_whose_message_was_lost_is_resent_by_the_sweeper(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    workflow_id = _workflow(acme, "echo-then-delay", [_echo("first"), {"id": "wait", "kind": "delay", "config": {}}])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    sent_advances.clear()  # and the broker lost it
    assert run_sweep_stale() == []
    five_minutes_ago = timezone.now() - timedelta(minutes=5)  # created and sent then, claimable since
    Run.unscoped_all_tenants.filter(pk=run.pk).update(enqueued_at=five_minutes_ago, wake_at=five_minutes_ago)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale() == [run.run_id]
    assert sent_advances == [([run.run_id], run.queue)]


def test_a_failure_before_the_commit_leaves_nothing(acme: Caller, django_capture_on_commit_callbacks) -> None:
    """A door's own record failing (or the process dying) before the commit: no run, no event."""

    def broken(run: Run) -> None:
        raise RuntimeError("database went away")

    before = Run.unscoped_all_tenants.count(), RunEvent.unscoped_all_tenants.count()
    with pytest.raises(RuntimeError):
        run_create(subject=acme.subject, workflow_id="echo", inputs={}, transport="a2a", inline=True, records=broken)
    assert (Run.unscoped_all_tenants.count(), RunEvent.unscoped_all_tenants.count()) == before


def test_an_unexpected_error_while_settling_hands_the_run_to_the_queue(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, monkeypatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("a bug in a step")

    monkeypatch.setattr(steps, "step_outcome", broken)
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks)  # never raises into the door
    fresh = _fresh(run)
    assert fresh.status == RunStatus.PENDING and fresh.lease_owner == "" and fresh.node_index == 0
    assert event_types(run.run_id) == ["run.started"]  # nothing of the failed attempt
    assert sent_advances == [([run.run_id], run.queue)]
    monkeypatch.undo()
    assert advance(run.run_id).status == RunStatus.COMPLETED
    assert_log_contiguous(run.run_id)


@pytest.mark.django_db(transaction=True)
async def test_a_request_cancelled_mid_run_still_commits_it_whole(acme: Caller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The door awaits the creation on a thread (sync_to_async); a client that disconnects cancels
    that await, not the thread: the node finishes and the run commits completed, in one piece."""
    entered, release = threading.Event(), threading.Event()

    class GatedEcho(EchoNode):
        def execute(self, ctx: Any) -> Any:
            entered.set()
            release.wait(30)
            return super().execute(ctx)

    monkeypatch.setitem(NODE_KINDS, "echo", GatedEcho())

    def create_on_a_request_thread() -> Run:
        try:
            return run_create(subject=acme.subject, workflow_id="echo", inputs={"n": 1}, transport="a2a", inline=True)
        finally:
            connections.close_all()

    request = asyncio.ensure_future(sync_to_async(create_on_a_request_thread, thread_sensitive=False)())
    assert await asyncio.to_thread(entered.wait, 30)
    # Mid-node, nothing is visible yet: the run exists only in the request's memory.
    assert await db_read(lambda: Run.unscoped_all_tenants.filter(inputs={"n": 1}).count()) == 0
    request.cancel()  # what Django does to the view on http.disconnect
    with pytest.raises(asyncio.CancelledError):
        await request
    release.set()

    def committed() -> Run | None:
        return Run.unscoped_all_tenants.filter(inputs={"n": 1}, status=RunStatus.COMPLETED).first()

    from tests.live import wait_until

    done = await db_read(lambda: wait_until(committed, "the run"))
    assert done.lease_owner == "" and done.outputs == {"n": 1}
    assert await db_read(lambda: event_types(done.run_id)) == [
        "run.started",
        "node.started",
        "node.completed",
        "run.completed",
    ]
