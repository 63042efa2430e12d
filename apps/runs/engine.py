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

A door that waits for the run's answer settles its instant nodes in memory instead (steps.py),
handing the run to this executor only at a node a worker must run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core import tracing
from apps.core.ids import split_bound_id
from apps.runs.log import run_save
from apps.runs.models import (
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Run,
    RunStatus,
)
from apps.runs.nodes import CancelObserved, Failed, NodeResult
from apps.runs.services import advance_send, run_finish_cancelled, unclaimed_due
from apps.runs.steps import (
    Draft,
    NodeWork,
    draft_write,
    interrupt_at,
    node_execute,
    node_interrupts,
    node_started_at,
    release,
    step_complete,
    step_node_started,
    step_outcome,
)
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)


def lease_seconds() -> float:
    return float(getattr(settings, "OPENWOP_RUN_LEASE_SECONDS", 10.0))


def heartbeat_seconds() -> float:
    return lease_seconds() / 5


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


def run_advance(*, run_id: str, worker: str) -> None:
    """Advance the run as far as it goes: to a suspension, to its end, or until the lease is lost."""
    tenant_slug, _ = split_bound_id(run_id)
    tenant_pk = Tenant.objects.values_list("pk", flat=True).filter(slug=tenant_slug).first()
    if tenant_pk is None:
        return
    found = Run.objects.for_tenant(tenant_pk).filter(run_id=run_id).values_list("pk", "traceparent").first()
    if found is None:
        return
    run_pk, traceparent = found
    lease = _lease_claim(tenant_pk=tenant_pk, run_pk=run_pk, owner=worker)
    if lease is None:
        return  # another worker is advancing it, or there is nothing to do
    with tracing.span("openwop.run.advance", traceparent=traceparent or None, attributes={"openwop.run_id": run_id}):
        try:
            while True:
                work = _plan(lease)
                if work is None:
                    return
                node = work.node
                step = {"openwop.node_id": str(node.get("id", "")), "openwop.node_kind": str(node.get("kind", ""))}
                with tracing.span("openwop.run.step", attributes=step):
                    result = _execute(work, lease)
                if not _apply(work, result, lease):
                    return
        except LeaseLost:
            logger.warning("run %s: lease lost by %s; another worker continues it", run_id, worker)


def _lease_claim(*, tenant_pk: int, run_pk: int, owner: str) -> Lease | None:
    now = timezone.now()
    claimed = (
        Run.objects.for_tenant(tenant_pk)
        .filter(pk=run_pk, status__in=RUNNABLE_STATUSES)
        .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now) | Q(lease_owner=owner))
        .update(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds()))
    )
    return Lease(tenant_pk=tenant_pk, run_pk=run_pk, owner=owner) if claimed == 1 else None


def _plan(lease: Lease) -> NodeWork | None:
    """Decide the next step under the row lock; None when the run stops here."""
    with transaction.atomic():
        run = lease.locked_run()
        if run.status in TERMINAL_STATUSES or run.status in WAITING_STATUSES:
            _release(run)
            return None
        if run.status == RunStatus.CANCELLING:
            run_finish_cancelled(run)
            return None
        draft = Draft(run)
        nodes = run.definition.get("nodes", [])
        if run.node_index >= len(nodes):
            step_complete(draft)
            draft_write(draft)
            return None
        node = nodes[run.node_index]
        started_at = node_started_at(run, node["id"])
        if started_at is None:
            started_at = step_node_started(draft, node).at
        else:
            run.status, run.current_node_id = RunStatus.RUNNING, node["id"]
        draft_write(draft)
        interrupt, branches = node_interrupts(run, node)
        return NodeWork(run, node, started_at, interrupt, tuple(branches))


def _execute(work: NodeWork, lease: Lease) -> NodeResult:
    try:
        return node_execute(
            work, heartbeat=lease.renew, cancel_requested=lease.cancel_requested, heartbeat_seconds=heartbeat_seconds()
        )
    except LeaseLost:
        raise
    except Exception:
        logger.exception("run %s: node %s raised", work.run.run_id, work.node["id"])
        return Failed(code="internal_error", message="The node failed unexpectedly.")


def _apply(work: NodeWork, result: NodeResult, lease: Lease) -> bool:
    """Write the node's outcome under the row lock; True when the run goes on to the next node."""
    with transaction.atomic():
        run = lease.locked_run()
        if run.status == RunStatus.CANCELLING:
            run_finish_cancelled(run)
            return False
        if isinstance(result, CancelObserved):
            return True  # a node saw a cancel the row no longer shows: nothing to do but re-plan
        if run.status != RunStatus.RUNNING or run.node_index != work.run.node_index:
            _release(run)
            return False
        draft = Draft(run)
        goes_on = step_outcome(draft, work.node["id"], result, interrupt_of=partial(interrupt_at, run))
        draft_write(draft)
        return goes_on


def _release(run: Run) -> None:
    """Give the lease back: the run stops here without a step."""
    release(run)
    run_save(run, "lease_owner", "lease_expires_at")


def run_sweep_stale() -> list[str]:
    """Re-enqueue runs whose worker died (expired lease) or whose message was lost or never sent
    (never claimed: `services.unclaimed_due`; a send that failed is due at once).

    A host-wide maintenance job, so it reads across tenants through the one escape hatch; it takes
    the runs of this process's queue only, the ones its workers execute (a run is re-sent to its
    own queue: a sweeper of another queue could only send it where its workers are not). Each
    re-enqueue is decided by a conditional UPDATE, so concurrent sweepers send one message per run.
    A send that fails (the broker is down) ends the sweep: the next tick tries again.
    """
    now = timezone.now()
    stale = (~Q(lease_owner="") & Q(lease_expires_at__lt=now)) | unclaimed_due(now)
    candidates = list(
        Run.unscoped_all_tenants.filter(status__in=RUNNABLE_STATUSES, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
        .filter(stale)
        .only("pk", "tenant_id", "run_id", "queue")[:500]
    )
    swept: list[str] = []
    for run in candidates:
        with transaction.atomic(durable=True):
            taken = (
                Run.unscoped_all_tenants.filter(pk=run.pk, status__in=RUNNABLE_STATUSES)
                .filter(stale)
                .update(lease_owner="", lease_expires_at=None, enqueued_at=now)
            )
            if taken:
                run.enqueued_at = now
                transaction.on_commit(partial(advance_send, run))
        if taken:
            if run.enqueued_at is None:  # advance_send could not reach the broker (and said so)
                break
            swept.append(run.run_id)
    if swept:
        logger.info("sweeper re-enqueued %d run(s)", len(swept))
    return swept
