"""The executor: workers claim runs fairly from PostgreSQL and advance them node by node, under a
lease, surviving dead workers (docs/contributors/run-executor.md).

Claim (`run_claim_next`): a worker thread takes one runnable run that no worker holds and that is
due (`wake_at` passed), from the tenants that have one in round-robin order, skipping a tenant at
its cap of runs in progress (OPENWOP_TENANT_RUNS_IN_PROGRESS, or its TenantBudget.runs_in_progress).
The row is taken with FOR UPDATE SKIP LOCKED, so claimers never queue on each other's rows. The
database is the queue of record: the broker's `runs.advance` only wakes a thread ("there is work"),
which claims whatever is fairest, so a lost or duplicated message costs nothing but a claim.

One step = plan (a short transaction: take the next node, append `node.started` once), execute
(outside any transaction, heartbeating the lease), apply (a short transaction: append the node's
outcome and move the run). The lease is a pair of columns claimed with a conditional UPDATE; a
worker that dies stops heartbeating, its lease expires, and `run_sweep_stale` frees the run.

A node that waits on the clock parks the run (nodes.Parked): apply writes the wake-up time and
gives the lease back, with no event and no change a door shows (the run stays `running` at that
node), and the run is claimed again when due. No thread waits meanwhile.

Steps are idempotent, which is what makes redelivery safe (acks_late, the sweeper, a second claim):
- a node with `node.completed` in the log is never run again (the run's `node_index` moved past it
  in the same transaction);
- a node with `node.started` but no outcome is executed again from its recorded start, so a delay
  waits only what remains, whether it was parked or its worker died;
- every write checks, under the row lock, that this worker still holds the lease, so a worker that
  lost it (and was replaced) writes nothing.

A door that waits for the run's answer settles its instant nodes in memory instead (steps.py),
handing the run to this executor only at a node a worker must run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core import tracing
from apps.core.ids import split_bound_id
from apps.core.logformat import log_scoped
from apps.runs.log import run_save
from apps.runs.models import (
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Run,
    RunStatus,
)
from apps.runs.nodes import SLEEP_BELOW, CancelObserved, Failed, NodeResult, Parked
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
from apps.tenants.models import Tenant, TenantBudget

logger = logging.getLogger(__name__)

# What a worker is told when it parks a run: (run id, queue, wake-up time). The worker process
# keeps the time and sends the run's wake-up then (apps/runs/tasks.py).
ParkHook = Callable[[str, str, datetime], None]


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


@dataclass(frozen=True)
class Claimed:
    """A run this worker holds the lease of, to advance."""

    lease: Lease
    run_id: str
    traceparent: str


def run_advance(*, run_id: str, worker: str, on_park: ParkHook | None = None) -> None:
    """Advance this one run as far as it goes: to a suspension, a park, its end, or until the lease
    is lost. Claimed by its id, whatever its tenant's turn or cap: the in-process callers' way (a
    conformance seam, the tests); workers claim with `runs_work`."""
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
    _advance(Claimed(lease, run_id, traceparent), on_park)


@dataclass(frozen=True)
class Worked:
    """What one `runs_work` did: how many runs it advanced, and whether it stopped with its
    budget spent while runs were still claimable (`last`: the run it advanced last)."""

    advanced: int
    more: bool
    last: str | None


def runs_work(
    *, worker: str, queue: str, on_park: ParkHook | None = None, budget_seconds: float | None = None
) -> Worked:
    """Claim runs fairly and advance each, until none is claimable or `budget_seconds` (a lease
    period by default) is spent: then the thread goes back to the worker's other queues, and the
    caller passes the turn on with one wake-up (`Worked.more`)."""
    budget = lease_seconds() if budget_seconds is None else budget_seconds
    ends = time.monotonic() + budget
    advanced = 0
    while True:
        claimed = run_claim_next(worker=worker, queue=queue)
        if claimed is None:
            return Worked(advanced, more=False, last=None)
        _advance(claimed, on_park)
        advanced += 1
        if time.monotonic() >= ends:
            return Worked(advanced, more=True, last=claimed.run_id)


def _advance(claimed: Claimed, on_park: ParkHook | None) -> None:
    lease = claimed.lease
    attributes = {"openwop.run_id": claimed.run_id}
    # Every line while it advances (a node that raised, a lost lease) names its tenant and run.
    tenant = claimed.run_id.partition("/")[0]
    with (
        log_scoped(tenant=tenant, operation="runs.advance", run_id=claimed.run_id),
        tracing.span("openwop.run.advance", traceparent=claimed.traceparent or None, attributes=attributes),
    ):
        try:
            while True:
                work = _plan(lease)
                if work is None:
                    return
                node = work.node
                step = {"openwop.node_id": str(node.get("id", "")), "openwop.node_kind": str(node.get("kind", ""))}
                with tracing.span("openwop.run.step", attributes=step):
                    result = _execute(work, lease)
                if not _apply(work, result, lease, on_park):
                    return
        except LeaseLost:
            logger.warning("run %s: lease lost by %s; another worker continues it", claimed.run_id, lease.owner)


def _lease_claim(*, tenant_pk: int, run_pk: int, owner: str) -> Lease | None:
    now = timezone.now()
    claimed = (
        Run.objects.for_tenant(tenant_pk)
        .filter(pk=run_pk, status__in=RUNNABLE_STATUSES)
        .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now) | Q(lease_owner=owner))
        .update(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds()))
    )
    return Lease(tenant_pk=tenant_pk, run_pk=run_pk, owner=owner) if claimed == 1 else None


# ---------------------------------------------------------------------------------------------
# The fair claim

_RUNS = Run._meta.db_table
_BUDGETS = TenantBudget._meta.db_table
# The `run_claim` index's predicate, spelled as its CREATE INDEX spells it, so that PostgreSQL
# proves every claim query may use it: unleased runs a worker advances.
_STATUSES = ", ".join(f"'{status}'" for status in sorted(RUNNABLE_STATUSES))
_UNLEASED = f"{{r}}.lease_owner = '' AND {{r}}.status IN ({_STATUSES})"
# A tenant's runs in progress (the `run_in_progress` index: leased ones), against its cap: its
# TenantBudget.runs_in_progress, else the host's default; 0 is unlimited.
_UNDER_CAP = f"""(
    COALESCE((SELECT b.runs_in_progress FROM {_BUDGETS} b WHERE b.tenant_id = {{tenant}}), %(cap)s) = 0
    OR (SELECT count(*) FROM {_RUNS} l
        WHERE l.tenant_id = {{tenant}} AND NOT (l.lease_owner = '') AND l.lease_expires_at >= %(now)s)
       < COALESCE((SELECT b.runs_in_progress FROM {_BUDGETS} b WHERE b.tenant_id = {{tenant}}), %(cap)s)
)"""  # noqa: S608 (our own table names; every value is a parameter)

# The tenants a claim may serve, in round-robin order after the one this process served last:
# each tenant with an unleased runnable run of the queue, found by a skip scan of `run_claim`
# (one probe per tenant, however many runs each has), kept when one of those is due and the
# tenant is under its cap. Reads only: nothing is locked.
_CLAIM_ORDER_SQL = f"""
WITH RECURSIVE tenants(tenant_id) AS (
    (SELECT r.tenant_id FROM {_RUNS} r WHERE {_UNLEASED.format(r="r")} AND r.queue = %(queue)s
     ORDER BY r.queue, r.tenant_id LIMIT 1)
  UNION ALL
    SELECT (SELECT r.tenant_id FROM {_RUNS} r
            WHERE {_UNLEASED.format(r="r")} AND r.queue = %(queue)s AND r.tenant_id > t.tenant_id
            ORDER BY r.queue, r.tenant_id LIMIT 1)
    FROM tenants t WHERE t.tenant_id IS NOT NULL
)
SELECT t.tenant_id FROM tenants t
WHERE t.tenant_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM {_RUNS} d
              WHERE {_UNLEASED.format(r="d")} AND d.queue = %(queue)s AND d.tenant_id = t.tenant_id
                AND d.wake_at <= %(due_by)s)
  AND {_UNDER_CAP.format(tenant="t.tenant_id")}
ORDER BY t.tenant_id <= %(after)s, t.tenant_id
"""  # noqa: S608 (our own table names and statuses; every value is a parameter)

# One tenant's claim, under its claim lock: its due run with the oldest wake-up, skipping rows
# another transaction holds, leased to this worker provided the tenant is still under its cap.
_CLAIM_SQL = f"""
UPDATE {_RUNS} SET lease_owner = %(owner)s, lease_expires_at = %(expires)s
WHERE id = (
    SELECT c.id FROM {_RUNS} c
    WHERE {_UNLEASED.format(r="c")} AND c.queue = %(queue)s AND c.tenant_id = %(tenant)s AND c.wake_at <= %(due_by)s
    ORDER BY c.queue, c.tenant_id, c.wake_at LIMIT 1
    FOR UPDATE SKIP LOCKED
)
  AND {_UNDER_CAP.format(tenant="%(tenant)s")}
RETURNING id, run_id, traceparent
"""  # noqa: S608 (our own table names and statuses; every value is a parameter)

# pg_advisory_xact_lock(namespace, tenant): one claimer at a time per tenant counts its runs in
# progress and leases one, so concurrent claims never take a tenant past its cap. The two-key form
# has a key space of its own (the beat leader's lock is a one-key lock).
CLAIM_LOCK_NAMESPACE = 0x52554E53  # "RUNS"

# The tenant this process claimed for last (round-robin position); a race between its threads
# costs one claim's turn, never a skipped tenant for good.
_claimed_after = 0


def claim_order(*, queue: str, now: datetime) -> list[int]:
    """The tenants (pks) a claim may serve now, in this process's round-robin order."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_ORDER_SQL, _claim_params(queue=queue, now=now, after=_claimed_after))
        return [row[0] for row in cursor.fetchall()]


def _claim_params(*, queue: str, now: datetime, **more: int | str | datetime) -> dict[str, int | str | datetime]:
    return {
        "queue": queue,
        "now": now,
        # A run due within SLEEP_BELOW is claimable: its node sleeps the rest (nodes.clock_wait), so
        # a wake-up a little early, or a claimer's clock a little behind the parker's, still claims it.
        "due_by": now + SLEEP_BELOW,
        "cap": int(settings.OPENWOP_TENANT_RUNS_IN_PROGRESS),
        **more,
    }


def run_claim_next(*, worker: str, queue: str) -> Claimed | None:
    """Lease the fairest claimable run of `queue` to `worker` (module docstring), or None when
    no tenant has a due run under its cap."""
    global _claimed_after
    now = timezone.now()
    for tenant_pk in claim_order(queue=queue, now=now):
        claimed = _claim_in_tenant(tenant_pk=tenant_pk, worker=worker, queue=queue)
        if claimed is not None:
            _claimed_after = tenant_pk
            return claimed
    return None


def _claim_in_tenant(*, tenant_pk: int, worker: str, queue: str) -> Claimed | None:
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CLAIM_LOCK_NAMESPACE, tenant_pk % 2**31])
        now = timezone.now()  # after the lock: the count below sees every claim committed before it
        params = _claim_params(
            queue=queue, now=now, tenant=tenant_pk, owner=worker, expires=now + timedelta(seconds=lease_seconds())
        )
        cursor.execute(_CLAIM_SQL, params)
        row = cursor.fetchone()
    if row is None:
        return None
    run_pk, run_id, traceparent = row
    return Claimed(Lease(tenant_pk=tenant_pk, run_pk=run_pk, owner=worker), run_id, traceparent)


# ---------------------------------------------------------------------------------------------
# A step


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
            draft_write(draft)
        elif (run.status, run.current_node_id) != (RunStatus.RUNNING, node["id"]):
            run.status, run.current_node_id = RunStatus.RUNNING, node["id"]
            draft_write(draft)
        # else: a parked run woken, or a resumed one: the row already says so, and an unchanged
        # row keeps its version (a Task's status timestamp, an ETag) as a sleeping worker did.
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


def _apply(work: NodeWork, result: NodeResult, lease: Lease, on_park: ParkHook | None) -> bool:
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
        if isinstance(result, Parked):
            _park(run, result.until)
            if on_park is not None:
                transaction.on_commit(partial(on_park, run.run_id, run.queue, result.until))
            return False
        draft = Draft(run)
        goes_on = step_outcome(draft, work.node["id"], result, interrupt_of=partial(interrupt_at, run))
        draft_write(draft)
        return goes_on


def _park(run: Run, until: datetime) -> None:
    """The run waits on the clock: claimable again at `until`, held by no one meanwhile. No
    event and an UPDATE that leaves `updated_at` alone: what a door shows of the run is what it
    showed while a worker slept in the node."""
    Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(wake_at=until, lease_owner="", lease_expires_at=None)


def _release(run: Run) -> None:
    """Give the lease back: the run stops here without a step."""
    release(run)
    run_save(run, "lease_owner", "lease_expires_at")


# ---------------------------------------------------------------------------------------------
# The sweeper

# Runs one sweep frees or wakes at most.
SWEEP_BATCH = 500


def run_sweep_stale(*, capacity: int = SWEEP_BATCH) -> list[str]:
    """Free what a dead worker held, and wake idle workers for work nothing else will wake them
    for; the run ids it sent a wake-up for.

    - A lease that expired (its worker died) is released, whatever the capacity, and the run is
      marked unsent (`enqueued_at` NULL): claimable at once, and due for a wake-up now.
    - A run cancelled while parked by a release that only marks it `cancelling` is made due now.
    - Wake-ups go out only for runs that are lost (`services.unclaimed_due`: the send failed, or
      claimable and unclaimed for a whole claim window), of tenants under their cap (a run waiting
      its turn is not lost), at most `capacity` of them: the worker's idle threads. A worker whose
      threads are all busy claims the backlog itself as each finishes, so a backlog never
      multiplies messages.

    A host-wide maintenance job, so it reads across tenants through the one escape hatch; it takes
    the runs of this process's queue only, the ones its workers execute. Each wake-up is decided by
    a conditional UPDATE, so concurrent sweepers send one per run. A send that fails (the broker is
    down) ends the sweep: the next tick tries again.
    """
    now = timezone.now()
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    runnable = Run.unscoped_all_tenants.filter(status__in=RUNNABLE_STATUSES, queue=queue)
    expired = runnable.filter(lease_expires_at__lt=now).exclude(lease_owner="")
    dead = list(expired.values_list("pk", flat=True)[:SWEEP_BATCH])
    if dead:
        # Conditional on the lease still being expired: a worker that renewed meanwhile keeps it.
        freed = expired.filter(pk__in=dead).update(lease_owner="", lease_expires_at=None, enqueued_at=None)
        logger.info("sweeper freed %d run(s) whose worker's lease expired", freed)
    runnable.filter(status=RunStatus.CANCELLING, lease_owner="", wake_at__gt=now).update(wake_at=now)
    if capacity <= 0:
        return []
    lost = unclaimed_due(now)
    tenants = claim_order(queue=queue, now=now)
    if not tenants:
        return []
    candidates = list(
        runnable.filter(lost, tenant_id__in=tenants, wake_at__lte=now)
        .order_by("wake_at")
        .only("pk", "tenant_id", "run_id", "queue")[:capacity]
    )
    swept: list[str] = []
    for run in candidates:
        with transaction.atomic(durable=True):
            taken = runnable.filter(lost, pk=run.pk).update(enqueued_at=now)
            if taken:
                run.enqueued_at = now
                transaction.on_commit(partial(advance_send, run))
        if taken:
            if run.enqueued_at is None:  # advance_send could not reach the broker (and said so)
                break
            swept.append(run.run_id)
    if swept:
        logger.info("sweeper woke workers for %d run(s) nothing else would wake them for", len(swept))
    return swept
