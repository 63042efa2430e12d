"""What a node's outcome does to a run, in memory: the one place node semantics become events.

A `Draft` is what one transaction writes for a run: its row (mutated in memory), the events it
appends, the interrupt a suspension opens. The worker (engine.py: a plan and an apply transaction
per node, under the lease) and the one-transaction paths (`run_create(inline=True)`, a resume with
`inline=True`) both build drafts with the same steps, so the same node plans the same events
whichever process runs it; only how often they commit differs.

`draft_settle` runs a draft's instant nodes (kinds whose `inline_safe` is true: they return at
once, with no sleep, outside call or heartbeat) in memory, until the run ends, suspends, or reaches
a node a worker must run (then `handoff`): a short run is then one transaction (DESIGN.md §The hot
path). Nothing is written before the caller commits the draft, so a process that dies meanwhile
leaves nothing behind, and one that dies after the commit leaves the whole settled run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from apps.core.ids import mint_bound_id
from apps.core.logformat import log_bind
from apps.runs.log import event_new, events_write, run_save
from apps.runs.models import Interrupt, Run, RunEvent, RunStatus
from apps.runs.nodes import (
    NODE_KINDS,
    WAITING_STATUS_BY_KIND,
    CancelObserved,
    Completed,
    Failed,
    NodeContext,
    NodeResult,
    Parked,
    Suspended,
    SuspendedMany,
    branch_key,
)

logger = logging.getLogger(__name__)

# The run row's columns a step may change: a draft saves them all in its one UPDATE.
RUN_STATE_FIELDS = (
    "status",
    "outputs",
    "error",
    "node_index",
    "current_node_id",
    "variables",
    "completed_at",
    "lease_owner",
    "lease_expires_at",
    "enqueued_at",
)


@dataclass
class Draft:
    """One transaction's writes for one run, built in memory."""

    run: Run
    events: list[RunEvent] = field(default_factory=list)
    interrupts: list[Interrupt] = field(default_factory=list)  # opened by a suspension, not yet inserted
    handoff: bool = False  # the next node is a worker's: enqueue the run on commit

    def append(self, type: str, payload: dict[str, Any], node_id: str | None = None) -> RunEvent:
        event = event_new(run=self.run, type=type, payload=payload, node_id=node_id)
        self.events.append(event)
        return event


def draft_write(draft: Draft) -> None:
    """Write a draft of a run whose row exists (locked by the caller): one UPDATE of the row, the
    opened interrupt, one INSERT of the events with the deliveries they owe."""
    run_save(draft.run, *RUN_STATE_FIELDS)
    draft_write_log(draft)


def draft_write_log(draft: Draft) -> None:
    """The draft's interrupts and events, for a row already written (updated or just inserted)."""
    for interrupt in draft.interrupts:
        interrupt.save(force_insert=True)
    events_write(run=draft.run, events=draft.events)


def release(run: Run) -> None:
    run.lease_owner, run.lease_expires_at = "", None


# ---------------------------------------------------------------------------------------------
# The steps


def step_node_started(draft: Draft, node: dict[str, Any]) -> RunEvent:
    event = draft.append("node.started", {"kind": node["kind"]}, node_id=node["id"])
    draft.run.status = RunStatus.RUNNING
    draft.run.current_node_id = node["id"]
    return event


def step_outcome(
    draft: Draft, node_id: str, result: NodeResult, *, interrupt_of: Callable[[str], Interrupt | None]
) -> bool:
    """The node's outcome on the run; True when the run goes on to its next node. `interrupt_of`
    finds an interrupt the node opened before (a suspension re-executed after a crash)."""
    run = draft.run
    if isinstance(result, Completed):
        for artifact in result.artifacts:
            draft.append(
                "artifact.created",
                {"artifactId": artifact.artifact_id, "name": artifact.name, "parts": artifact.parts},
                node_id=node_id,
            )
        draft.append("node.completed", {"outputs": result.outputs}, node_id=node_id)
        run.variables = {**run.variables, node_id: result.outputs}
        run.outputs = result.outputs
        run.node_index += 1
        run.current_node_id = ""
        return True
    if isinstance(result, Failed):
        error = result.as_error()
        draft.append("node.failed", {"error": error}, node_id=node_id)
        draft.append("run.failed", {"error": error})
        run.status = RunStatus.FAILED
        run.error = error
        run.completed_at = timezone.now()
        run.current_node_id = ""
        release(run)
        return False
    if isinstance(result, SuspendedMany):
        for key, suspended in result.opened:
            if interrupt_of(key) is None:
                _interrupt_open(draft, node_id, key, suspended)
        _wait(draft.run, node_id, result.waiting)
        return False
    assert isinstance(result, Suspended), result
    if interrupt_of(node_id) is None:
        _interrupt_open(draft, node_id, node_id, result)
    _wait(draft.run, node_id, result.kind)
    return False


def _interrupt_open(draft: Draft, node_id: str, key: str, suspended: Suspended) -> None:
    """Open the interrupt `key` (the node's id, or a parallel branch's `<node>.<branch>`)."""
    run = draft.run
    payload = {
        "kind": str(suspended.kind),
        "key": key,
        "data": suspended.data,
        "resumeSchema": suspended.resume_schema,
    }
    interrupt = Interrupt(
        tenant_id=run.tenant_id,
        interrupt_id=mint_bound_id(run.run_id.partition("/")[0]),
        run=run,
        node_id=key,
        kind=suspended.kind,
        payload=payload,
    )
    draft.interrupts.append(interrupt)
    # interrupt.md §Events: interrupt.requested carries the InterruptPayload verbatim.
    draft.append("interrupt.requested", payload, node_id=node_id)
    suspended_payload = {"interruptId": interrupt.interrupt_id, "kind": interrupt.kind}
    if key != node_id:
        suspended_payload["key"] = key
    draft.append("node.suspended", suspended_payload, node_id=node_id)


def _wait(run: Run, node_id: str, kind: str) -> None:
    run.status = WAITING_STATUS_BY_KIND[kind]
    run.current_node_id = node_id
    release(run)


def step_complete(draft: Draft) -> None:
    run = draft.run
    # events.md: run.completed carries `outputs` as an object, `{}` when there are none.
    outputs = run.outputs if isinstance(run.outputs, dict) else {}
    draft.append("run.completed", {"outputs": outputs})
    run.status = RunStatus.COMPLETED
    run.outputs = outputs
    run.completed_at = timezone.now()
    run.current_node_id = ""
    release(run)


def step_handoff(draft: Draft) -> None:
    """The next node is a worker's: the run goes to the queue unleased (`runs.advance` on commit)."""
    release(draft.run)
    draft.run.enqueued_at = timezone.now()
    draft.handoff = True


@dataclass(frozen=True)
class NodeWork:
    """A node to execute on its run as planned: `run` is not changed while the node runs.
    `interrupt`: the one the node opened; `branch_interrupts`: its parallel branches' so far."""

    run: Run
    node: dict[str, Any]
    started_at: datetime
    interrupt: Interrupt | None = None
    branch_interrupts: Sequence[Interrupt] = ()


def node_execute(
    work: NodeWork, *, heartbeat: Callable[[], None], cancel_requested: Callable[[], bool], heartbeat_seconds: float
) -> NodeResult:
    """Run one node (the caller turns an unexpected exception into an internal_error failure)."""
    interrupt, node = work.interrupt, work.node
    resolved = interrupt is not None and interrupt.resolved_at is not None
    ctx = NodeContext(
        run_id=work.run.run_id,
        node_id=node["id"],
        config=node.get("config", {}),
        inputs=work.run.inputs,
        variables=work.run.variables,
        started_at=work.started_at,
        heartbeat=heartbeat,
        cancel_requested=cancel_requested,
        resolved=resolved,
        resume_value=interrupt.resolution if resolved and interrupt is not None else None,
        heartbeat_seconds=heartbeat_seconds,
        branches={i.node_id: (i.kind, i.resolved_at is not None, i.resolution) for i in work.branch_interrupts},
    )
    return NODE_KINDS[node["kind"]].execute(ctx)


def node_started_at(run: Run, node_id: str) -> datetime | None:
    """When the node last started (its newest `node.started`); None when it never has."""
    return (
        RunEvent.objects.for_tenant(run.tenant_id)
        .filter(run=run, type="node.started", node_id=node_id)
        .order_by("-sequence")
        .values_list("at", flat=True)
        .first()
    )


def interrupt_at(run: Run, node_id: str) -> Interrupt | None:
    """The interrupt the run opened at `node_id` (a node's id or a branch's key), if any."""
    return Interrupt.objects.for_tenant(run.tenant_id).filter(run=run, node_id=node_id).first()


def node_interrupts(run: Run, node: dict[str, Any]) -> tuple[Interrupt | None, list[Interrupt]]:
    """The interrupt a node opened (keyed by its id) and its parallel branches' (keyed
    `<node>.<branch>`), read in one query; ([] for a node with no branches)."""
    node_id = str(node.get("id", ""))
    keys = [node_id]
    if node.get("kind") == "parallel":
        config = node.get("config") or {}
        keys += [branch_key(node_id, str(b.get("id"))) for b in config.get("branches", []) if isinstance(b, dict)]
    found = {i.node_id: i for i in Interrupt.objects.for_tenant(run.tenant_id).filter(run=run, node_id__in=keys)}
    own = found.pop(node_id, None)
    return own, list(found.values())


# ---------------------------------------------------------------------------------------------
# Settling in memory


def _no_heartbeat() -> None:
    """No lease to renew: nothing else can see the run (created in this transaction) or touch it
    (its row is locked by this transaction) until the draft commits."""


def _no_cancel() -> bool:
    return False  # a cancel waits on the row lock (or cannot find the run) until the commit


def draft_settle(
    draft: Draft,
    *,
    budget: int,
    resumed: NodeWork | None = None,
    interrupt_of: Callable[[str], Interrupt | None],
) -> None:
    """Run the draft's instant nodes in memory, at most `budget` of them, until the run ends,
    suspends, or its next node is a worker's (then `handoff`). `resumed`: the run's next node, which
    a resolved interrupt resumes (already started: its node.started is in the log). Never raises:
    should a step fail unexpectedly, the draft is put back as it came and handed to the queue."""
    run = draft.run
    log_bind(run_id=run.run_id)  # the request's log lines name the run it settles
    saved_row, saved_events = dict(run.__dict__), len(draft.events)
    try:
        _settle(draft, budget=budget, resumed=resumed, interrupt_of=interrupt_of)
    except Exception:
        logger.exception("run %s: settling in memory failed; handing the run to a worker", run.run_id)
        run.__dict__.update(saved_row)
        del draft.events[saved_events:]
        draft.interrupts = []
        step_handoff(draft)


def _settle(
    draft: Draft, *, budget: int, resumed: NodeWork | None, interrupt_of: Callable[[str], Interrupt | None]
) -> None:
    run = draft.run
    ran = 0
    while True:
        nodes = run.definition.get("nodes", [])
        if run.node_index >= len(nodes):
            step_complete(draft)
            return
        node = nodes[run.node_index]
        kind = NODE_KINDS.get(node.get("kind", ""))
        if ran >= budget or kind is None or not kind.inline_safe:
            step_handoff(draft)
            return
        if resumed is not None:
            work, resumed = resumed, None
            run.status = RunStatus.RUNNING
        else:
            work = NodeWork(run, node, step_node_started(draft, node).at)
        try:
            result = node_execute(work, heartbeat=_no_heartbeat, cancel_requested=_no_cancel, heartbeat_seconds=1.0)
        except Exception:
            logger.exception("run %s: node %s raised", run.run_id, node["id"])
            result = Failed(code="internal_error", message="The node failed unexpectedly.")
        assert not isinstance(result, CancelObserved | Parked), "an instant node never waits"
        ran += 1
        if not step_outcome(draft, node["id"], result, interrupt_of=interrupt_of):
            return
