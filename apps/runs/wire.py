"""The wire documents of a run, shared by every door that shows one: RunSnapshot (runs.md
§Snapshot) and RunEventDoc (run-event.schema.json)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from apps.core.discovery import ENGINE_VERSION, EVENT_LOG_SCHEMA_VERSION
from apps.runs.models import RunEvent
from apps.runs.reads import OpenInterrupt, RunRow

EVENT_SCHEMA_VERSION = 3


def wire_timestamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_event_doc(event: RunEvent, *, run_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "eventId": event.event_id,
        "runId": run_id,
        "type": event.type,
        "payload": event.payload,
        "timestamp": wire_timestamp(event.at),
        "sequence": event.sequence,
        "schemaVersion": EVENT_SCHEMA_VERSION,
        "engineVersion": ENGINE_VERSION,
    }
    if event.node_id:
        doc["nodeId"] = event.node_id
    return doc


def interrupt_doc(interrupt: OpenInterrupt) -> dict[str, Any]:
    return {"interruptId": interrupt.interrupt_id, "nodeId": interrupt.node_id, **interrupt.payload}


def run_snapshot_doc(run: RunRow, *, open_interrupt: OpenInterrupt | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "runId": run.run_id,
        "workflowId": run.workflow_id,
        "status": run.status,
        "owner": run.owner,
        "eventLogSchemaVersion": EVENT_LOG_SCHEMA_VERSION,
        "engineVersion": ENGINE_VERSION,
    }
    if run.current_node_id:
        doc["currentNodeId"] = run.current_node_id
    if run.started_at:
        doc["startedAt"] = wire_timestamp(run.started_at)
    if run.completed_at:
        doc["completedAt"] = wire_timestamp(run.completed_at)
    if run.error:
        doc["error"] = run.error
    if run.agent_id:
        doc["agent"] = {"agentId": run.agent_id}
    if open_interrupt is not None:
        doc["interrupt"] = interrupt_doc(open_interrupt)
    return doc


def run_etag(run: RunRow) -> str:
    """Strong ETag over the newest sequence and the status: `cancelling` is observable without an
    event, so the sequence alone would not change on every transition (runs.md §Caching)."""
    digest = hashlib.sha256(f"{run.run_id}\x00{run.last_sequence}\x00{run.status}".encode()).hexdigest()
    return f'"{digest[:32]}"'
