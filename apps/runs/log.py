"""Appending to a run's event log, and the one name of a run's wake-up group.

Events are built in memory (`event_new`, which moves the run's `last_sequence`) and written by
`events_write`, the only writer of RunEvent rows: one bulk INSERT for however many events a
transaction appends, the push deliveries they owe, and one wake-up on commit. The caller holds the
run's row lock inside a transaction (or is creating the run in it) and saves the run in the same
transaction (`run_save`), so the row's `last_sequence` and the log advance together: sequence n+1
can only follow n, and the unique (run, sequence) constraint turns any slip into an error rather
than a gap or a duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.ids import mint_opaque, split_bound_id
from apps.core.metrics import run_events_committed
from apps.core.sse import publish_wake, wake_group_name
from apps.push.services import push_deliveries_for_events
from apps.runs.models import Run, RunEvent


def run_wake_group(run_id: str) -> str:
    """The channel-layer group SSE streams and long polls of this run listen on."""
    tenant, _ = split_bound_id(run_id)
    return wake_group_name("run", tenant, run_id)


def event_new(*, run: Run, type: str, payload: dict[str, Any], node_id: str | None = None) -> RunEvent:
    """The run's next event, in memory: its sequence is taken from the run, nothing is written."""
    run.last_sequence += 1
    return RunEvent(
        tenant_id=run.tenant_id,
        run=run,
        sequence=run.last_sequence,
        event_id=mint_opaque(),
        type=type,
        payload=payload,
        node_id=node_id or "",
        at=timezone.now(),
    )


def events_write(*, run: Run, events: Sequence[RunEvent]) -> None:
    """Insert `events` (from `event_new`, in order) in one statement, with the push deliveries
    they owe; one wake-up goes out on commit."""
    if not events:
        return
    RunEvent.objects.for_tenant(run.tenant_id).bulk_create(events)
    # A wake-up is a hint that new rows are committed; the rows themselves are the data.
    transaction.on_commit(partial(publish_wake, run_wake_group(run.run_id)))
    tenant, _ = split_bound_id(run.run_id)
    transaction.on_commit(partial(run_events_committed, run.transport, [event.type for event in events], tenant))
    push_deliveries_for_events(run=run, events=events)  # rows commit with the events; sent on commit


def event_append(*, run: Run, type: str, payload: dict[str, Any], node_id: str | None = None) -> RunEvent:
    """Append one event now (`event_new` + `events_write`)."""
    event = event_new(run=run, type=type, payload=payload, node_id=node_id)
    events_write(run=run, events=[event])
    return event


def run_save(run: Run, *fields: str) -> None:
    """Save `fields` of a locked run, always with the log position it reached."""
    run.save(update_fields=sorted({*fields, "last_sequence", "updated_at"}))
