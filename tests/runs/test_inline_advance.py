"""Inline advance of short runs (engine.run_advance_inline): a door that waits for a run runs its
instant nodes in its own process, hands the rest to the queue, and leaves nothing a worker or the
sweeper could not pick up. In-process on the real database; `sent_advances` records the Celery
messages (conftest), `django_capture_on_commit_callbacks` makes a `db` test's on_commit fire."""

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
from apps.runs import engine
from apps.runs.engine import run_advance_inline, run_sweep_stale
from apps.runs.models import Run, RunEvent, RunStatus
from apps.runs.nodes import NODE_KINDS, EchoNode
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from tests.a2a.live import db_read
from tests.live import wait_until
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
    """What a waiting door does: create for inline advance, then advance, on-commit hooks firing."""
    with capture(execute=True):
        run = run_create(
            subject=caller.subject, workflow_id=workflow_id, inputs=inputs, transport="a2a", inline=True
        )
    return run


def _fresh(run: Run) -> Run:
    return Run.unscoped_all_tenants.get(pk=run.pk)


def test_kinds_that_wait_or_call_out_are_not_inline_safe() -> None:
    assert {kind for kind, node in NODE_KINDS.items() if node.inline_safe} == {
        "echo", "fail", "artifact", "approval", "input", "credential",
    }


def test_an_instant_run_completes_inline_and_sends_no_message(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks, {"text": "hi"})
    assert _fresh(run).enqueued_at is not None  # the sweeper's safety net, should no advance come
    with django_capture_on_commit_callbacks(execute=True):
        run_advance_inline(run)
    done = _fresh(run)
    assert done.status == RunStatus.COMPLETED and done.outputs == {"text": "hi"}
    assert done.lease_owner == "" and done.lease_expires_at is None
    assert event_types(run.run_id) == ["run.started", "node.started", "node.completed", "run.completed"]
    assert sent_advances == []  # no Celery round trip at all
    assert_log_contiguous(run.run_id)


def test_a_node_that_waits_is_handed_to_the_queue_before_it_starts(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    workflow_id = _workflow(acme, "echo-then-delay", [_echo("first"), {"id": "wait", "kind": "delay", "config": {}}])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        run_advance_inline(run)
    handed = _fresh(run)
    assert handed.status == RunStatus.RUNNING and handed.node_index == 1
    assert handed.lease_owner == "" and handed.lease_expires_at is None  # a worker can claim it at once
    assert event_types(run.run_id) == ["run.started", "node.started", "node.completed"]  # delay not started
    assert sent_advances == [([run.run_id], handed.queue)]
    # The worker that message reaches finishes it.
    assert advance(run.run_id, worker="celery-worker").status == RunStatus.COMPLETED
    assert event_types(run.run_id)[-3:] == ["node.started", "node.completed", "run.completed"]
    assert_log_contiguous(run.run_id)


def test_the_node_budget_bounds_an_inline_advance(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, settings
) -> None:
    settings.OPENWOP_INLINE_MAX_NODES = 2
    workflow_id = _workflow(acme, "three-echoes", [_echo("a"), _echo("b"), _echo("c")])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        run_advance_inline(run)
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
    run_advance_inline(run)
    assert _fresh(run).status == RunStatus.PENDING and _fresh(run).lease_owner == ""
    assert event_types(run.run_id) == ["run.started"]


def test_a_suspension_is_reached_inline(acme: Caller, django_capture_on_commit_callbacks, sent_advances) -> None:
    run = _create_inline(acme, "conformance-approval", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        run_advance_inline(run)
    waiting = _fresh(run)
    assert waiting.status == RunStatus.WAITING_APPROVAL and waiting.lease_owner == ""
    assert "interrupt.requested" in event_types(run.run_id)
    assert sent_advances == []


def test_a_run_a_worker_holds_is_left_to_it(acme: Caller, django_capture_on_commit_callbacks, sent_advances) -> None:
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks)
    assert engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner="busy-worker") is not None
    run_advance_inline(run)
    assert _fresh(run).lease_owner == "busy-worker"
    assert event_types(run.run_id) == ["run.started"] and sent_advances == []


def test_a_run_created_for_inline_advance_that_never_came_is_resent_by_the_sweeper(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks)  # and the process died here
    assert run_sweep_stale() == []
    Run.unscoped_all_tenants.filter(pk=run.pk).update(enqueued_at=timezone.now() - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale() == [run.run_id]
    assert sent_advances == [([run.run_id], run.queue)]


def test_an_inline_advancer_that_dies_mid_run_is_recovered_by_the_sweeper(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:
    """The web process claimed the lease and started a node, then died: its lease expires, the
    sweeper re-enqueues the run, a worker finishes it without a second node.started."""
    workflow_id = _workflow(acme, "two-echoes", [_echo("a"), _echo("b")])
    run = _create_inline(acme, workflow_id, django_capture_on_commit_callbacks)
    owner = engine.inline_owner()
    assert ":inline:" in owner
    lease = engine._lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner=owner)
    assert lease is not None and engine._plan(lease) is not None  # node a started, then nothing
    assert run_sweep_stale() == []  # the lease is live: nothing to recover yet
    Run.unscoped_all_tenants.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale() == [run.run_id]
    assert sent_advances == [([run.run_id], run.queue)]
    assert advance(run.run_id, worker="celery-worker").status == RunStatus.COMPLETED
    started = RunEvent.unscoped_all_tenants.filter(run=run, type="node.started").values_list("node_id", flat=True)
    assert sorted(started) == ["a", "b"]
    assert_log_contiguous(run.run_id)


def test_an_unexpected_error_hands_the_run_to_the_queue(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances, monkeypatch
) -> None:
    run = _create_inline(acme, "echo", django_capture_on_commit_callbacks)

    def broken_apply(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("database went away")

    monkeypatch.setattr(engine, "_apply", broken_apply)
    with django_capture_on_commit_callbacks(execute=True):
        run_advance_inline(run)  # never raises into the door
    assert _fresh(run).lease_owner == ""
    assert sent_advances == [([run.run_id], run.queue)]


@pytest.mark.django_db(transaction=True)
async def test_a_request_cancelled_mid_advance_leaves_no_lease_behind(acme: Caller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The door awaits the advance on a thread (sync_to_async); a client that disconnects cancels
    that await, not the thread: the node finishes, the run completes, the lease is released."""
    entered, release = threading.Event(), threading.Event()

    class GatedEcho(EchoNode):
        def execute(self, ctx: Any) -> Any:
            entered.set()
            release.wait(30)
            return super().execute(ctx)

    monkeypatch.setitem(NODE_KINDS, "echo", GatedEcho())
    run = await db_read(
        lambda: run_create(subject=acme.subject, workflow_id="echo", inputs={"n": 1}, transport="a2a", inline=True)
    )

    def advance_on_a_request_thread() -> None:
        try:
            run_advance_inline(run)
        finally:
            connections.close_all()

    request = asyncio.ensure_future(sync_to_async(advance_on_a_request_thread, thread_sensitive=False)())
    assert await asyncio.to_thread(entered.wait, 30)
    assert (await db_read(lambda: _fresh(run))).lease_owner != ""  # mid-node, leased
    request.cancel()  # what Django does to the view on http.disconnect
    with pytest.raises(asyncio.CancelledError):
        await request
    release.set()
    done = await db_read(lambda: wait_until(lambda: (r := _fresh(run)).status == RunStatus.COMPLETED and r, "the run"))
    assert done.lease_owner == "" and done.outputs == {"n": 1}
