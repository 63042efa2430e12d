"""The executor: advances a run node by node, under a lease, surviving dead workers.

One step = plan (a short transaction: take the next node, append `node.started` once), execute
(outside any transaction, heartbeating the lease), apply (a short transaction: append the node's
outcome and move the run). The lease is a pair of columns claimed with a conditional UPDATE; a
worker that dies stops heartbeating, its lease expires, and `run_sweep_stale` re-enqueues the run.

Steps are idempotent, which is what makes redelivery safe (acks_late, the sweeper):
- a node with `node.completed` in the log is never run again (the run's `node_index` moved past it
  in the same transaction);
- a node with `node.started` but no outcome is executed again from its recorded start, so a delay
  sleeps only what remains;
- every write checks, under the row lock, that this worker still holds the lease, so a worker that
  lost it (and was replaced) writes nothing.

Inline advance (`run_advance_inline`): a door that is going to wait for the run's answer anyway
(blocking SendMessage, MCP tools/call) advances a run it just created in its own process, as a
worker would (same lease, same steps), but only through nodes whose kind is `inline_safe` and at
most OPENWOP_INLINE_MAX_NODES of them. At the first other node it releases the lease and enqueues
the run, in the plan's transaction, before that node starts; a worker then continues as usual.
If the web process dies meanwhile, its lease expires and the sweeper re-enqueues the run.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.ids import mint_bound_id, split_bound_id
from apps.runs.log import event_append, run_save
from apps.runs.models import (
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Interrupt,
    Run,
    RunEvent,
    RunStatus,
)
from apps.runs.nodes import (
    NODE_KINDS,
    WAITING_STATUS_BY_KIND,
    CancelObserved,
    Completed,
    Failed,
    NodeContext,
    NodeResult,
    Suspended,
    node_kind,
)
from apps.runs.services import advance_send, inline_max_nodes, run_finish_cancelled
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)


def lease_seconds() -> float:
    return float(getattr(settings, "OPENWOP_RUN_LEASE_SECONDS", 10.0))


def heartbeat_seconds() -> float:
    return lease_seconds() / 5


# A run enqueued but never claimed this long ago is re-sent (a message lost between commit and broker).
REQUEUE_UNCLAIMED_AFTER = timedelta(seconds=60)


class LeaseLost(Exception):
    """Another worker owns the run now: stop without writing anything."""


@dataclass
class Lease:
    tenant_pk: int
    run_pk: int
    owner: str

    def renew(self) -> None:
        renewed = (
            Run.objects.for_tenant(self.tenant_pk)
            .filter(pk=self.run_pk, lease_owner=self.owner)
            .update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds()))
        )
        if renewed != 1:
            raise LeaseLost(self.owner)

    def locked_run(self) -> Run:
        """The run row, locked for this transaction, provided the lease is still ours."""
        run = Run.objects.for_tenant(self.tenant_pk).select_for_update().get(pk=self.run_pk)
        if run.lease_owner != self.owner:
            raise LeaseLost(self.owner)
        return run

    def cancel_requested(self) -> bool:
        status = Run.objects.for_tenant(self.tenant_pk).filter(pk=self.run_pk).values_list("status", flat=True).first()
        return status == RunStatus.CANCELLING


@dataclass(frozen=True)
class NodeWork:
    index: int
    node: dict[str, Any]
    run_id: str
    inputs: dict[str, Any]
    variables: dict[str, Any]
    started_at: datetime
    interrupt: Interrupt | None = field(default=None)


def run_advance(*, run_id: str, worker: str) -> None:
    """Advance the run as far as it goes: to a suspension, to its end, or until the lease is lost."""
    tenant_slug, _ = split_bound_id(run_id)
    tenant_pk = Tenant.objects.values_list("pk", flat=True).filter(slug=tenant_slug).first()
    if tenant_pk is None:
        return
    run_pk = Run.objects.for_tenant(tenant_pk).filter(run_id=run_id).values_list("pk", flat=True).first()
    if run_pk is None:
        return
    lease = _lease_claim(tenant_pk=tenant_pk, run_pk=run_pk, owner=worker)
    if lease is None:
        return  # another worker is advancing it, or there is nothing to do
    try:
        while True:
            work = _plan(lease)
            if work is None:
                return
            result = _execute(work, lease)
            if not _apply(work, result, lease):
                return
    except LeaseLost:
        logger.warning("run %s: lease lost by %s; another worker continues it", run_id, worker)


def inline_owner() -> str:
    """The lease owner of an inline advance: this host and process, and this advance."""
    return f"{socket.gethostname()}:{os.getpid()}:inline:{secrets.token_hex(6)}"


def run_advance_inline(run: Run) -> None:
    """Advance a run in this (web) process through its instant nodes, then hand it to the queue.

    For a door that waits for the run anyway, right after `run_create(..., inline=True)`
    committed; a no-op when OPENWOP_INLINE_MAX_NODES is 0. It claims the lease like a worker, so a
    run some worker already holds (a replayed request, a sweeper's re-send) is left to it. Never
    raises: on an unexpected error the run goes to the queue. Called from a thread (sync_to_async);
    a request cancelled meanwhile does not stop it, so it always ends by finishing its nodes,
    suspending, or handing off, and never leaves the lease held beyond its expiry.
    """
    budget = inline_max_nodes()
    if budget <= 0:
        return
    lease = None
    try:
        lease = _lease_claim(tenant_pk=run.tenant_id, run_pk=run.pk, owner=inline_owner())
        if lease is None:
            return  # a worker holds it, or there is nothing to do
        ran = 0

        def runs_here(node: dict[str, Any]) -> bool:
            kind = NODE_KINDS.get(node.get("kind", ""))
            return ran < budget and kind is not None and kind.inline_safe

        renewed = time.monotonic()
        while True:
            work = _plan(lease, runs_here=runs_here)
            if work is None:
                return
            result = _execute(work, lease)
            ran += 1
            if not _apply(work, result, lease):
                return
            if time.monotonic() - renewed >= heartbeat_seconds():
                lease.renew()
                renewed = time.monotonic()
    except LeaseLost:
        logger.warning("run %s: inline lease lost; a worker continues it", run.run_id)
    except Exception:
        logger.exception("run %s: inline advance failed; handing the run to a worker", run.run_id)
        _handoff_after_error(run, lease)


def _handoff_after_error(run: Run, lease: Lease | None) -> None:
    """Best effort; should it fail too, the lease expires and the sweeper re-enqueues the run."""
    try:
        if lease is None:
            advance_send(run.run_id, run.queue)
            return
        with transaction.atomic():
            _handoff(lease.locked_run())
    except Exception:
        logger.exception("run %s: hand-off failed; the sweeper will re-enqueue it", run.run_id)


def _handoff(run: Run) -> None:
    """Give a locked run to the queue: release the lease and send `runs.advance` on commit."""
    _release(run)
    run.enqueued_at = timezone.now()
    run_save(run, "lease_owner", "lease_expires_at", "enqueued_at")
    run_id, queue = run.run_id, run.queue
    transaction.on_commit(partial(advance_send, run_id, queue))


def _lease_claim(*, tenant_pk: int, run_pk: int, owner: str) -> Lease | None:
    now = timezone.now()
    claimed = (
        Run.objects.for_tenant(tenant_pk)
        .filter(pk=run_pk, status__in=RUNNABLE_STATUSES)
        .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now) | Q(lease_owner=owner))
        .update(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds()))
    )
    return Lease(tenant_pk=tenant_pk, run_pk=run_pk, owner=owner) if claimed == 1 else None


def _release(run: Run) -> None:
    run.lease_owner, run.lease_expires_at = "", None


def _plan(lease: Lease, *, runs_here: Callable[[dict[str, Any]], bool] | None = None) -> NodeWork | None:
    """Decide the next step under the row lock; None when the run stops here.

    `runs_here` (inline advance): whether this process may run the next node; when not, the run
    is handed to the queue before the node starts."""
    with transaction.atomic():
        run = lease.locked_run()
        if run.status in TERMINAL_STATUSES or run.status in WAITING_STATUSES:
            _release(run)
            run_save(run, "lease_owner", "lease_expires_at")
            return None
        if run.status == RunStatus.CANCELLING:
            run_finish_cancelled(run)
            return None
        nodes = run.definition.get("nodes", [])
        if run.node_index >= len(nodes):
            _complete(run)
            return None
        node = nodes[run.node_index]
        if runs_here is not None and not runs_here(node):
            _handoff(run)
            return None
        started = (
            RunEvent.objects.for_tenant(run.tenant_id)
            .filter(run=run, type="node.started", node_id=node["id"])
            .order_by("-sequence")
            .first()
        )
        if started is None:
            started = event_append(run=run, type="node.started", payload={"kind": node["kind"]}, node_id=node["id"])
        run.status = RunStatus.RUNNING
        run.current_node_id = node["id"]
        run_save(run, "status", "current_node_id")
        interrupt = Interrupt.objects.for_tenant(run.tenant_id).filter(run=run, node_id=node["id"]).first()
        return NodeWork(
            index=run.node_index,
            node=node,
            run_id=run.run_id,
            inputs=run.inputs,
            variables=run.variables,
            started_at=started.at,
            interrupt=interrupt,
        )


def _execute(work: NodeWork, lease: Lease) -> NodeResult:
    interrupt = work.interrupt
    resolved = interrupt is not None and interrupt.resolved_at is not None
    ctx = NodeContext(
        run_id=work.run_id,
        node_id=work.node["id"],
        config=work.node.get("config", {}),
        inputs=work.inputs,
        variables=work.variables,
        started_at=work.started_at,
        heartbeat=lease.renew,
        cancel_requested=lease.cancel_requested,
        resolved=resolved,
        resume_value=interrupt.resolution if resolved and interrupt is not None else None,
        heartbeat_seconds=heartbeat_seconds(),
    )
    try:
        return node_kind(work.node["kind"]).execute(ctx)
    except LeaseLost:
        raise
    except Exception:
        logger.exception("run %s: node %s raised", work.run_id, work.node["id"])
        return Failed(code="internal_error", message="The node failed unexpectedly.")


def _apply(work: NodeWork, result: NodeResult, lease: Lease) -> bool:
    """Write the node's outcome under the row lock; True when the run goes on to the next node."""
    node_id = work.node["id"]
    with transaction.atomic():
        run = lease.locked_run()
        if run.status == RunStatus.CANCELLING or isinstance(result, CancelObserved):
            if run.status == RunStatus.CANCELLING:
                run_finish_cancelled(run)
                return False
            # A node saw a cancel the row no longer shows: nothing to do but re-plan.
            return True
        if run.status != RunStatus.RUNNING or run.node_index != work.index:
            _release(run)
            run_save(run, "lease_owner", "lease_expires_at")
            return False
        if isinstance(result, Completed):
            for artifact in result.artifacts:
                event_append(
                    run=run,
                    type="artifact.created",
                    payload={"artifactId": artifact.artifact_id, "name": artifact.name, "parts": artifact.parts},
                    node_id=node_id,
                )
            event_append(run=run, type="node.completed", payload={"outputs": result.outputs}, node_id=node_id)
            run.variables = {**run.variables, node_id: result.outputs}
            run.outputs = result.outputs
            run.node_index += 1
            run.current_node_id = ""
            run_save(run, "variables", "outputs", "node_index", "current_node_id")
            return True
        if isinstance(result, Failed):
            error = result.as_error()
            event_append(run=run, type="node.failed", payload={"error": error}, node_id=node_id)
            event_append(run=run, type="run.failed", payload={"error": error})
            run.status = RunStatus.FAILED
            run.error = error
            run.completed_at = timezone.now()
            run.current_node_id = ""
            _release(run)
            run_save(run, "status", "error", "completed_at", "current_node_id", "lease_owner", "lease_expires_at")
            return False
        assert isinstance(result, Suspended)
        _suspend(run, node_id=node_id, suspended=result)
        return False


def _suspend(run: Run, *, node_id: str, suspended: Suspended) -> None:
    interrupt = Interrupt.objects.for_tenant(run.tenant_id).filter(run=run, node_id=node_id).first()
    if interrupt is None:
        payload = {
            "kind": str(suspended.kind),
            "key": node_id,
            "data": suspended.data,
            "resumeSchema": suspended.resume_schema,
        }
        interrupt = Interrupt.objects.create(
            tenant_id=run.tenant_id,
            interrupt_id=mint_bound_id(run.run_id.partition("/")[0]),
            run=run,
            node_id=node_id,
            kind=suspended.kind,
            payload=payload,
        )
        # interrupt.md §Events: interrupt.requested carries the InterruptPayload verbatim.
        event_append(run=run, type="interrupt.requested", payload=payload, node_id=node_id)
        event_append(
            run=run,
            type="node.suspended",
            payload={"interruptId": interrupt.interrupt_id, "kind": interrupt.kind},
            node_id=node_id,
        )
    run.status = WAITING_STATUS_BY_KIND[suspended.kind]
    run.current_node_id = node_id
    _release(run)
    run_save(run, "status", "current_node_id", "lease_owner", "lease_expires_at")


def _complete(run: Run) -> None:
    # events.md: run.completed carries `outputs` as an object, `{}` when there are none.
    outputs = run.outputs if isinstance(run.outputs, dict) else {}
    event_append(run=run, type="run.completed", payload={"outputs": outputs})
    run.status = RunStatus.COMPLETED
    run.outputs = outputs
    run.completed_at = timezone.now()
    run.current_node_id = ""
    _release(run)
    run_save(run, "status", "outputs", "completed_at", "current_node_id", "lease_owner", "lease_expires_at")


def run_sweep_stale() -> list[str]:
    """Re-enqueue runs whose worker died (expired lease) or whose message was lost (never claimed).

    A host-wide maintenance job, so it reads across tenants through the one escape hatch. Each
    re-enqueue is decided by a conditional UPDATE, so concurrent sweepers send one message per run.
    """
    now = timezone.now()
    stale = (~Q(lease_owner="") & Q(lease_expires_at__lt=now)) | Q(
        lease_owner="", enqueued_at__lt=now - REQUEUE_UNCLAIMED_AFTER
    )
    candidates = list(
        Run.unscoped_all_tenants.filter(status__in=RUNNABLE_STATUSES)
        .filter(stale)
        .values_list("pk", "run_id", "queue")[:500]
    )
    swept: list[str] = []
    for pk, run_id, queue in candidates:
        with transaction.atomic(durable=True):
            taken = (
                Run.unscoped_all_tenants.filter(pk=pk, status__in=RUNNABLE_STATUSES)
                .filter(stale)
                .update(lease_owner="", lease_expires_at=None, enqueued_at=now)
            )
            if taken:
                transaction.on_commit(partial(advance_send, run_id, queue))
                swept.append(run_id)
    if swept:
        logger.info("sweeper re-enqueued %d run(s)", len(swept))
    return swept
