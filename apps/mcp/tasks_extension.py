"""The tasks extension `io.modelcontextprotocol/tasks` (SEP-2663) over runs (map c.6 `mcp.tasks`).

`taskId` is the run's projected id. Every method reads the run's snapshot in the caller's tenant
(apps/runs/reads.py, the read every door shares), so a task the caller cannot read — unknown,
another tenant's, malformed — is one error, byte for byte.
`tasks/get` is a projection and appends nothing; `tasks/update` resolves each named interrupt at
most once and ignores the rest; `tasks/cancel` is cancelRun, acknowledged on a finished run.
"""

from __future__ import annotations

import contextlib
from typing import Any

from apps.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from apps.core.ids import split_bound_id, unproject_id
from apps.mcp.errors import invalid_params, missing_capability, unknown_task
from apps.mcp.exchange import TASKS_EXTENSION, Exchange
from apps.mcp.projection import answers_of, artifacts_of, server_meta, task_doc
from apps.retention.services import run_ttl_ms
from apps.runs.reads import RunSnapshot, snapshot_read_sync
from apps.runs.services import interrupts_resolve, run_cancel
from apps.tenants.selectors import subject_tenant_pk


def _task_read(exchange: Exchange, params: dict[str, Any], *, artifacts: bool = False) -> RunSnapshot:
    """The task's run, for a caller that declared the extension (-32021 otherwise)."""
    if not exchange.tasks_declared:
        raise missing_capability({"extensions": {TASKS_EXTENSION: {}}})
    task_id = params.get("taskId")
    if not isinstance(task_id, str):
        raise unknown_task()
    try:
        run_id = unproject_id(task_id)
        split_bound_id(run_id)
        tenant_pk = subject_tenant_pk(exchange.subject)
        return snapshot_read_sync(tenant_pk=tenant_pk, run_id=run_id, artifacts=artifacts, definition=artifacts)
    except (ValidationFailed, NotFound):
        raise unknown_task() from None


def task_get(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    snapshot = _task_read(exchange, params, artifacts=True)
    run = snapshot.run
    doc = task_doc(
        run,
        open_interrupts=snapshot.open_interrupts,
        form=exchange.elicitation_form,
        url=exchange.elicitation_url,
        detailed=True,
        ttl_ms=run_ttl_ms(run.tenant_id),
        client=exchange.capabilities,
        artifacts=artifacts_of(snapshot) if run.is_terminal else (),
        definition=snapshot.definition,
    )
    return {"resultType": "complete", **doc, "_meta": server_meta()}


def task_update(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    snapshot = _task_read(exchange, params)
    responses = params.get("inputResponses")
    if not isinstance(responses, dict):
        raise invalid_params("params.inputResponses must be an object")
    resolutions = answers_of(snapshot.open_interrupts, responses)
    if resolutions:
        # Resolved at most once; an answer the schema refuses leaves the task input_required. A
        # subset of a parallel node's keys is a partial answer: the task stays input_required
        # with the rest (SEP-2663).
        # A caller the interrupt's approversList does not name resolves nothing (Forbidden), and
        # is acknowledged like any answer that does not count (interrupt.md §Approver enforcement).
        with contextlib.suppress(Conflict, ValidationFailed, Forbidden):
            interrupts_resolve(subject=exchange.subject, run_id=snapshot.run.run_id, resolutions=resolutions)
    return {"resultType": "complete", "_meta": server_meta()}


def task_cancel(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    run_id = _task_read(exchange, params).run.run_id
    with contextlib.suppress(Conflict):  # a finished run: acknowledged, nothing appended ((i) 26)
        run_cancel(subject=exchange.subject, run_id=run_id)
    return {"resultType": "complete", "_meta": server_meta()}
