"""Writes for runs: the spine every door calls (DESIGN.md "one run, four doors").

REST, A2A and MCP all create runs with `run_create`, cancel with `run_cancel` and resume with
`interrupt_resolve`; each door only translates its wire to these calls and their errors back.
Every state change appends its events in the same transaction, under the run's row lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import jsonschema
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.agents.definitions import workflow_inputs_check
from apps.agents.models import Workflow
from apps.agents.selectors import workflow_get
from apps.core import tracing
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.ids import mint_bound_id
from apps.runs.approvers import approver_check
from apps.runs.budgets import run_budgets_admit, run_budgets_admit_settled
from apps.runs.idempotency import (
    IdempotencyClaim,
    IdempotentReplay,
    idempotency_complete,
    idempotency_run,
)
from apps.runs.log import event_append, run_insert_settled, run_save
from apps.runs.models import (
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Interrupt,
    Run,
    RunStatus,
    RunTransport,
)
from apps.runs.nodes import WAITING_STATUS_BY_KIND
from apps.runs.steps import (
    RUN_STATE_FIELDS,
    Draft,
    NodeWork,
    draft_settle,
    draft_write_log,
    interrupt_at,
    node_interrupts,
    node_started_at,
    step_handoff,
)
from apps.runs.trace_context import run_trace_from
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

CREATE_RUN_ENDPOINT = "POST /runs"


_TRANSPORTS = frozenset(RunTransport.values)  # `.values` builds a new list at every read


def _run_arguments_checked(*, transport: str, inputs: Any, context_id: str | None) -> dict[str, Any]:
    if transport not in _TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}")
    inputs = {} if inputs is None else inputs
    if not isinstance(inputs, dict):
        raise ValidationFailed("inputs must be an object.", details={"field": "inputs"})
    if context_id is not None and not 1 <= len(context_id) <= 256:
        raise ValidationFailed("contextId is 1-256 characters.", details={"field": "contextId"})
    return inputs


def run_draft(
    *,
    subject: Subject,
    workflow: Workflow,
    inputs: dict[str, Any] | None,
    transport: str,
    context_id: str | None = None,
    agent_id: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
    inline: bool = False,
) -> Draft:
    """The new run of `workflow` (a row of the subject's tenant) as `run_create` commits it, built
    in memory and written by nobody yet: checked inputs, the row, `run.started`, and with `inline`
    its instant nodes settled (or the handoff to a worker). `run_create` writes it through the
    ORM, `run_create_settled` as one statement from the event loop."""
    inputs = _run_arguments_checked(transport=transport, inputs=inputs, context_id=context_id)
    tenant_pk = workflow.tenant_id
    workflow_inputs_check(input_schema=workflow.input_schema, inputs=inputs)
    owner = {"tenant": subject.tenant, "subject": subject.as_wire()}
    trace = run_trace_from(traceparent, tracestate)
    now = timezone.now()
    run = Run(
        tenant_id=tenant_pk,
        run_id=mint_bound_id(subject.tenant),
        owner=owner,
        workflow=workflow,
        definition=workflow.definition,
        inputs=inputs,
        status=RunStatus.PENDING,
        transport=transport,
        context_id=context_id or "",
        agent_id=agent_id or "",
        traceparent=trace.traceparent,
        tracestate=trace.tracestate,
        started_at=now,
        queue=settings.CELERY_TASK_DEFAULT_QUEUE,
        wake_at=now,  # claimable from its creation: a worker's claims take a tenant's oldest first
    )
    draft = Draft(run)
    # runs.md §The start event: the owner block exactly as RunSnapshot.owner carries it.
    draft.append("run.started", {"owner": owner, "transport": transport})
    budget = inline_max_nodes() if inline else 0
    attributes = {"openwop.run_id": run.run_id, "openwop.transport": transport, "openwop.inline": budget > 0}
    with tracing.span("openwop.run.create", traceparent=run.traceparent, attributes=attributes):
        if budget > 0:
            # A run nothing else can see yet has no interrupt to find.
            draft_settle(draft, budget=budget, interrupt_of=lambda node_id: None)
        else:
            step_handoff(draft)
    return draft


def run_create(
    *,
    subject: Subject,
    workflow_id: str,
    inputs: dict[str, Any] | None,
    transport: str,
    context_id: str | None = None,
    idempotency: IdempotencyClaim | None = None,
    agent_id: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
    inline: bool = False,
    records: Callable[[Run], None] | None = None,
    workflow: Workflow | None = None,
) -> Run:
    """Create a run of the subject's workflow, in one transaction, and return it as committed.

    `workflow`: the row the caller already read for `workflow_id` in the subject's tenant (a door
    that checked it first), so it is not read twice.

    Inputs are checked against the workflow's inputSchema before any run exists. The run starts
    with its `run.started` event (owner and transport) in the log. The caller's trace context is
    kept when well formed; otherwise the run gets a fresh one (§Trace context).

    `inline`: the caller is a door that waits for the run's answer (blocking SendMessage, MCP
    tools/call). Its instant nodes are then run in memory, at most OPENWOP_INLINE_MAX_NODES of them
    (steps.draft_settle), and the run is committed once, settled: completed, failed, suspended on
    an interrupt, or handed to the queue at the first node a worker must run (DESIGN.md §The hot
    path). Without it (or with OPENWOP_INLINE_MAX_NODES=0) the run is committed pending and a
    worker advances it. Either way one commit holds the row, its events, the deliveries they owe,
    the idempotency record and `records(run)` (the door's own rows, such as A2A's Message record,
    written after the row and before the events), then one wake-up (and `runs.advance` when a
    worker is to continue) goes out. A process that dies before the commit leaves nothing; one that
    dies after it leaves the whole run, which a retry with the same key finds.

    Past one of the tenant's run budgets (runs_queued, runs_per_minute: apps/runs/budgets.py) it
    raises RateLimited before reading the workflow, and nothing is written.
    """
    _run_arguments_checked(transport=transport, inputs=inputs, context_id=context_id)  # before the lookup
    tenant_pk = subject_tenant_pk(subject)
    # The tenant's run budgets, before the work: a refusal (429) reads no workflow, writes nothing.
    run_budgets_admit(tenant_pk=tenant_pk, tenant=subject.tenant)
    if workflow is None or workflow.tenant_id != tenant_pk or workflow.workflow_id != workflow_id:
        workflow = workflow_get(tenant=tenant_pk, workflow_id=workflow_id)
    draft = run_draft(
        subject=subject, workflow=workflow, inputs=inputs, transport=transport, context_id=context_id,
        agent_id=agent_id, traceparent=traceparent, tracestate=tracestate, inline=inline,
    )  # fmt: skip
    run = draft.run
    with transaction.atomic(durable=True):
        run.save(force_insert=True)
        if records is not None:
            records(run)
        draft_write_log(draft)
        if idempotency is not None:
            idempotency_complete(claim=idempotency, run=run, status=201, body=run_created_doc(run))
        if draft.handoff:
            transaction.on_commit(partial(advance_send, run))
    return run


async def run_create_settled(
    *,
    subject: Subject,
    workflow: Workflow,
    inputs: Any,
    transport: str,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Run | None:
    """`run_create(inline=True, workflow=workflow)` for a caller on the event loop with nothing
    of its own in the run's transaction (MCP tools/call): the run as committed in one statement
    (`log.run_insert_settled`), or None, with nothing written, when it is not a run that settles
    terminal in memory or its events may owe a delivery; the caller then runs `run_create`."""
    draft = run_draft(
        subject=subject, workflow=workflow, inputs=inputs, transport=transport,
        traceparent=traceparent, tracestate=tracestate, inline=True,
    )  # fmt: skip
    if draft.handoff or draft.interrupts or not draft.run.is_terminal:
        return None
    # A run settled in memory is never queued: only its tenant's runs per minute bind it.
    await run_budgets_admit_settled(tenant_pk=workflow.tenant_id, tenant=subject.tenant)
    return draft.run if await run_insert_settled(draft.run, draft.events) else None


def run_created_doc(run: Run) -> dict[str, Any]:
    """What a create answers, door-agnostic (the REST door adds its links), and a cancel too."""
    return {"runId": run.run_id, "status": run.status}


run_cancelled_doc = run_created_doc


@dataclass(frozen=True)
class RunCreation:
    run: Run
    created: dict[str, Any]  # run_created_doc as first answered (a replay answers the same)
    replayed: bool


def run_create_idempotent(
    *,
    subject: Subject,
    idempotency_key: str,
    request_body: Any,
    workflow_id: str,
    inputs: dict[str, Any] | None,
    transport: str,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> RunCreation:
    """`run_create` under an Idempotency-Key: a replay returns the first run, never a second one."""
    outcome = idempotency_run(
        subject=subject,
        endpoint=CREATE_RUN_ENDPOINT,
        key=idempotency_key,
        request_body=request_body,
        perform=lambda claim: run_create(
            subject=subject,
            workflow_id=workflow_id,
            inputs=inputs,
            transport=transport,
            idempotency=claim,
            traceparent=traceparent,
            tracestate=tracestate,
        ),
    )
    if isinstance(outcome, IdempotentReplay):
        if outcome.run is None:
            raise NotFound("The run this key created no longer exists.")
        run = run_resend_unclaimed(run=outcome.run)  # a retry starts a run the broker never got
        return RunCreation(run=run, created=outcome.body, replayed=True)
    return RunCreation(run=outcome, created=run_created_doc(outcome), replayed=False)


def run_cancel(
    *, subject: Subject, run_id: str, reason: str | None = None, idempotency: IdempotencyClaim | None = None
) -> Run:
    """Cancel a run (runs.md §Cancel). A run no worker is executing (pending, waiting, parked on the
    clock, between steps) is cancelled at once; one a worker holds moves to `cancelling` and its
    worker finishes the cancel at its next write, or within ~100 ms from inside a short wait.
    409 run_terminal on a finished run."""
    _require_own_tenant(subject=subject, run_id=run_id)
    with transaction.atomic(durable=True):
        run = _run_locked(subject=subject, run_id=run_id)
        if run.status in TERMINAL_STATUSES:
            raise Conflict("run_terminal", f"The run is already {run.status}.", details={"runStatus": run.status})
        if run.status == RunStatus.CANCELLING:
            _complete_claim(idempotency, run, run_cancelled_doc(run))
            return run
        run.cancel_reason = (reason or "cancelled by the caller")[:500]
        run.cancelled_by = subject.subject_id
        now = timezone.now()
        if run.status == RunStatus.RUNNING and run.lease_owner and (run.lease_expires_at or now) > now:
            run.status = RunStatus.CANCELLING
            run_save(run, "status", "cancel_reason", "cancelled_by")
            _complete_claim(idempotency, run, run_cancelled_doc(run))
            # The worker holding the lease finishes the cancel; if none does (it dies), the run is
            # claimable at once once its lease is freed, and this wake-up (or the sweeper's) sends
            # a worker to it.
            Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(enqueued_at=now, wake_at=now)
            transaction.on_commit(partial(advance_send, run))
            return run
        # Under the row lock, with no live lease: no worker is executing it, and one whose lease
        # expired finds the lease gone at its next write and writes nothing.
        run_finish_cancelled(run)
        _complete_claim(idempotency, run, run_cancelled_doc(run))
    return run


def interrupt_resolved_doc(run: Run, node_id: str) -> dict[str, Any]:
    return {"runId": run.run_id, "nodeId": node_id, "status": run.status}


def _complete_claim(claim: IdempotencyClaim | None, run: Run, body: dict[str, Any]) -> None:
    if claim is not None:
        idempotency_complete(claim=claim, run=run, status=200, body=body)


def run_finish_cancelled(run: Run) -> None:
    """Record the cancel of a locked run: node.cancelled for a node in flight, then run.cancelled."""
    now = timezone.now()
    if run.current_node_id:
        event_append(run=run, type="node.cancelled", payload={"reason": run.cancel_reason}, node_id=run.current_node_id)
    started = run.started_at or run.created_at
    payload: dict[str, Any] = {
        "reason": run.cancel_reason or "cancelled",
        "durationMs": max(0, int((now - started).total_seconds() * 1000)),
    }
    if run.cancelled_by:
        payload["cancelledBy"] = run.cancelled_by
    event_append(run=run, type="run.cancelled", payload=payload)
    run.status = RunStatus.CANCELLED
    run.completed_at = now
    run.current_node_id = ""
    run.lease_owner, run.lease_expires_at = "", None
    fields = ("status", "completed_at", "current_node_id", "lease_owner", "lease_expires_at")
    run_save(run, *fields, "cancel_reason", "cancelled_by")


def interrupt_resolve(
    *,
    subject: Subject,
    run_id: str,
    node_id: str,
    resume_value: Any,
    idempotency: IdempotencyClaim | None = None,
    inline: bool = False,
    records: Callable[[Run], None] | None = None,
) -> Run:
    """Resolve the interrupt a run is suspended on at `node_id`, exactly once (interrupt.md).

    Two concurrent resolves serialise on the run's row lock; the interrupt row is then flipped by
    a conditional update, so the loser always sees 409 interrupt_already_resolved.

    `inline`: as in `run_create`, the resumed node and the instant nodes after it run in memory in
    this transaction, under the row lock, and the run commits settled; otherwise (and with
    OPENWOP_INLINE_MAX_NODES=0) it commits `running` and a worker continues it. `records(run)`:
    the door's own rows, in the same transaction.
    """
    return interrupts_resolve(
        subject=subject,
        run_id=run_id,
        resolutions={node_id: resume_value},
        idempotency=idempotency,
        inline=inline,
        records=records,
    )


def interrupts_resolve(
    *,
    subject: Subject,
    run_id: str,
    resolutions: Mapping[str, Any],
    idempotency: IdempotencyClaim | None = None,
    inline: bool = False,
    records: Callable[[Run], None] | None = None,
) -> Run:
    """`interrupt_resolve` for several interrupts of one run at once (a parallel node's branches,
    keyed by interrupt key), all or none: one refused answer refuses them all.

    A run waiting on a parallel node stays waiting while any of its interrupts is open; the
    resolution that closes the last one resumes it (in memory with `inline`, else on a worker)."""
    if not resolutions:
        raise ValidationFailed("Nothing to resolve.")
    _require_own_tenant(subject=subject, run_id=run_id)
    with transaction.atomic(durable=True):
        run = _run_locked(subject=subject, run_id=run_id)
        # One read: the interrupts named, and every open one (is any left open after these?).
        named_or_open = Q(node_id__in=list(resolutions)) | Q(resolved_at__isnull=True)
        rows = list(Interrupt.objects.for_tenant(run.tenant_id).filter(named_or_open, run=run).order_by("created_at"))
        found = {i.node_id: i for i in rows if i.node_id in resolutions}
        still_open = next((i.kind for i in rows if i.node_id not in resolutions and i.resolved_at is None), None)
        for node_id in resolutions:
            if node_id not in found:
                raise NotFound(f"The run has no interrupt at node {node_id!r}.", details={"nodeId": node_id})
        if run.status not in WAITING_STATUSES or any(i.resolved_at is not None for i in found.values()):
            raise Conflict(
                "interrupt_already_resolved",
                "The interrupt was already resolved, or its run has ended.",
                details={"runStatus": run.status},
            )
        for node_id, resume_value in resolutions.items():
            approver_check(subject=subject, payload=found[node_id].payload)  # before any answer counts
            _resume_value_check(interrupt=found[node_id], resume_value=resume_value)
        now = timezone.now()
        draft = Draft(run)
        for node_id, resume_value in resolutions.items():
            interrupt = found[node_id]
            flipped = (
                Interrupt.objects.for_tenant(run.tenant_id)
                .filter(pk=interrupt.pk, resolved_at__isnull=True)
                .update(resolved_at=now, resolution=resume_value)
            )
            if flipped != 1:
                raise Conflict("interrupt_already_resolved", "The interrupt was already resolved.")
            interrupt.resolved_at, interrupt.resolution = now, resume_value
            draft.append(
                "interrupt.resolved",
                {
                    "nodeId": node_id,
                    "interruptId": interrupt.interrupt_id,
                    "kind": interrupt.kind,
                    "resumeValue": resume_value,
                },
                node_id=run.current_node_id or node_id,
            )
        if still_open is not None:
            # A parallel node still waits on another branch: the run keeps waiting, as that one.
            run.status = WAITING_STATUS_BY_KIND[still_open]
        else:
            _resume(run, draft, inline=inline, answered=found)
        run_save(run, *RUN_STATE_FIELDS)
        if records is not None:
            records(run)
        draft_write_log(draft)
        _complete_claim(idempotency, run, interrupt_resolved_doc(run, next(iter(resolutions))))
        if draft.handoff:
            transaction.on_commit(partial(advance_send, run))
    return run


def _resume(run: Run, draft: Draft, *, inline: bool, answered: Mapping[str, Interrupt]) -> None:
    """Every interrupt of the run is answered: its current node runs again with the answers, in
    memory when `inline` allows and the node is still the one suspended, else on a worker.
    `answered`: the interrupts just resolved, by key (a plain node's own is among them)."""
    run.status = RunStatus.RUNNING
    budget = inline_max_nodes() if inline else 0
    nodes = run.definition.get("nodes", [])
    node = nodes[run.node_index] if run.node_index < len(nodes) else None
    if budget > 0 and node is not None and run.current_node_id == node.get("id"):
        if node.get("kind") == "parallel":
            interrupt, branches = node_interrupts(run, node)  # branches answered earlier too
        else:
            interrupt, branches = answered.get(run.current_node_id), []
            if interrupt is None:  # not the suspended node's own interrupt: a worker sorts it out
                step_handoff(draft)
                return
        started_at = node_started_at(run, run.current_node_id)
        fallback = (interrupt or branches[0]).created_at if (interrupt or branches) else timezone.now()
        draft_settle(
            draft,
            budget=budget,
            resumed=NodeWork(run, node, started_at or fallback, interrupt, branches),
            interrupt_of=partial(interrupt_at, run),
        )
    else:
        step_handoff(draft)


def _resume_value_check(*, interrupt: Interrupt, resume_value: Any) -> None:
    schema = interrupt.payload.get("resumeSchema") or {}
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(resume_value), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ValidationFailed(
            "The resumeValue does not match the interrupt's resumeSchema.",
            details={
                "field": "resumeValue",
                "errors": [{"path": "/" + "/".join(map(str, e.absolute_path)), "message": e.message} for e in errors],
            },
        )


def _require_own_tenant(*, subject: Subject, run_id: str) -> None:
    """Services are door-agnostic: a foreign id is simply not found here (doors decide 403)."""
    if run_id.partition("/")[0] != subject.tenant:
        raise NotFound("No such run.")


def _run_locked(*, subject: Subject, run_id: str) -> Run:
    run = Run.objects.for_tenant(subject_tenant_pk(subject)).select_for_update().filter(run_id=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    return run


def inline_max_nodes() -> int:
    """How many nodes a waiting door may run in its own process (0: inline advance is off)."""
    return max(0, int(settings.OPENWOP_INLINE_MAX_NODES))


def advance_send(run: Run) -> None:
    """Send a wake-up (`runs.advance`) for the run: what creation, a resume, a cancel, the sweeper
    and a client's retry send, on commit. A wake-up only tells a worker there is work: the worker
    claims from the database (engine.run_claim_next), so a lost or repeated one costs nothing.

    The run is committed whatever the broker says, so a send that fails (the broker is down) is
    not the caller's error: it is logged and recorded as `enqueued_at = NULL` (no message out), in
    the row and on `run`, and the sweeper or the client's retry (`run_resend_unclaimed`) sends it
    once the broker is back."""
    from apps.runs.tasks import wake_send  # the task module imports the engine, which imports this one

    if not wake_send(run_id=run.run_id, queue=run.queue):
        unsent = Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk, lease_owner="", status__in=RUNNABLE_STATUSES)
        unsent.update(enqueued_at=None)
        run.enqueued_at = None


def claim_window() -> timedelta:
    """How long a run may stay claimable and unclaimed, with a wake-up out for it, before its
    wake-up counts as lost: one lease period (a worker with an idle thread claims it within
    milliseconds of the message, a busy one as soon as a thread frees; the sweeper only wakes
    workers that have idle threads)."""
    return timedelta(seconds=float(settings.OPENWOP_RUN_LEASE_SECONDS))


def unclaimed_due(now: datetime) -> Q:
    """Runs no worker holds whose wake-up is lost: none went out (`enqueued_at` NULL: the send
    failed, or a dead worker's lease was freed), or the run has been claimable, with its last one
    out, for a whole claim window (since the later of the last send and its wake-up time). With
    RUNNABLE_STATUSES."""
    stale = now - claim_window()
    return Q(lease_owner="") & (Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=stale, wake_at__lt=stale))


def run_resend_unclaimed(*, run: Run) -> Run:
    """A client's retry of the request that created `run` (A2A: the same messageId) re-sends the
    wake-up of a run no worker claimed (`unclaimed_due`), so a run accepted during a broker outage
    starts when the client retries, sweeper or not. A conditional UPDATE decides, so of concurrent
    retries and sweepers one sends it. The common retry (its run claimed or just sent) costs no query."""
    now = timezone.now()
    stale = now - claim_window()
    if (
        run.status not in RUNNABLE_STATUSES
        or run.lease_owner
        or (run.enqueued_at is not None and max(run.enqueued_at, run.wake_at) >= stale)
    ):
        return run
    with transaction.atomic(durable=True):
        taken = (
            Run.objects.for_tenant(run.tenant_id)
            .filter(unclaimed_due(now), pk=run.pk, status__in=RUNNABLE_STATUSES)
            .update(enqueued_at=now)
        )
        if taken:
            run.enqueued_at = now
            transaction.on_commit(partial(advance_send, run))
    return run
