"""`tools/list` and `tools/call`: the caller's workflows as tools, each call a run (map c.6).

The mount translates; runs decide. `tools/call` checks the arguments through `run_create` (before
any run exists), starts the run with transport `mcp`, and answers with the run's first state worth
answering: terminal -> CallToolResult; suspended on approval/input -> InputRequiredResult keyed by
the interruptId, or, when the call declared the tasks extension, CreateTaskResult at once.

Until the response is sent the run belongs to the request (interop.md §MCP tasks and
cancellation): a client that goes away while we wait (Django cancels the view on `http.disconnect`;
the stdio loop cancels on `notifications/cancelled`) cancels the run with `mcp-request-cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from mcp.shared.inbound import validate_mcp_param_headers

from apps.agents.models import TaskSupport, Workflow
from apps.agents.selectors import workflow_get_readable_cached, workflow_list_readable
from apps.core.errors import Conflict, Forbidden, NotFound, OpenWopError, ValidationFailed
from apps.core.invalidation import TOPIC_CARD, acached
from apps.facets.services import facet_ensure
from apps.mcp.client_nodes import CLIENT_CAPABILITY_BY_KIND
from apps.mcp.errors import (
    McpError,
    invalid_params,
    invalid_request_state,
    mcp_error_from,
    missing_capability,
    mrtr_rounds_exceeded,
)
from apps.mcp.exchange import TASKS_EXTENSION, Exchange, name_and_arguments
from apps.mcp.notifications import RunFinish
from apps.mcp.projection import (
    RUN_ID_META_KEY,
    answers_of,
    input_requests,
    private_result,
    server_meta,
    snapshot_tool_result,
    task_doc,
    tool_error_result,
)
from apps.mcp.request_state import request_state_mint, request_state_open, request_state_redeem
from apps.mcp.resources import atool_result_of
from apps.mcp.waiting import run_read, run_wait
from apps.retention.services import arun_ttl_ms
from apps.runs.models import Run, RunStatus, RunTransport
from apps.runs.nodes import definition_kinds
from apps.runs.reads import RunSnapshot, snapshot_read_sync
from apps.runs.services import interrupts_resolve, run_cancel, run_create, run_create_settled
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

REQUEST_CANCELLED_REASON = "mcp-request-cancelled"
# With the tasks extension, a run that ends within this grace is answered directly (SEP-2663's
# immediate-result shortcut: a quick tool is not made a task); one still going becomes a task.
TASK_GRACE_SECONDS = 0.5  # below views.SSE_AFTER_SECONDS: a task answer is never streamed
TOOLS_TTL_MS = 30_000
_ANSWERABLE_WAITS = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT})

T = TypeVar("T")


# --- tools/list -------------------------------------------------------------------------------


def tool_doc(workflow: Workflow) -> dict[str, Any]:
    schema = dict(workflow.input_schema or {})
    schema.setdefault("type", "object")
    doc: dict[str, Any] = {"name": workflow.workflow_id, "inputSchema": schema}
    if workflow.name:
        doc["title"] = workflow.name
    if workflow.description:
        doc["description"] = workflow.description
    doc["execution"] = {"taskSupport": workflow.task_support}
    return doc


def tools_list_result(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    """Every workflow of the caller's tenant, by name; the list depends on the caller: private."""
    workflows = workflow_list_readable(subject=exchange.subject)
    return private_result(TOOLS_TTL_MS, tools=[tool_doc(w) for w in workflows])


# --- tools/call -------------------------------------------------------------------------------


Finish = Callable[[], Awaitable[dict[str, Any]]]


def settled(result: dict[str, Any]) -> Finish:
    """A result already in hand, as the finishing step of a request that waits for nothing."""

    async def finish() -> dict[str, Any]:
        return result

    return finish


async def tool_call_begin(exchange: Exchange, params: dict[str, Any]) -> Finish:
    """Everything that can refuse the call (and so carry its own HTTP status) happens here, before
    or while the run is created or continued; the step returned only waits for the run to answer,
    so HTTP may stream it (views.py). Once this returns, the run belongs to that step: cancelling
    it cancels the run."""
    name, arguments = name_and_arguments(params, "tool")
    subject = exchange.subject
    token = params.get("requestState")
    committed: Run | None = None
    if token is not None:
        run_id, round = await _owned(subject, lambda: _call_continue(exchange, name, arguments, token, params))
    else:
        started = await _call_start_settled(exchange, name, arguments)
        if started is None:
            started = await _owned(subject, lambda: _call_start(exchange, name, arguments))
        if isinstance(started, dict):
            return settled(started)  # refused before any run exists
        committed, run_id, round = started, started.run_id, 0
    # The step, with its run: a transport may tell the run's events on the request's stream (notifications.py).
    return RunFinish(
        step=lambda: _answer(exchange, name, arguments, run_id, round, committed=committed),
        subject=subject,
        run_id=run_id,
        committed=committed,
        continued=token is not None,
    )


async def _owned(subject: Subject, step: Callable[[], T]) -> T:
    """Run a sync step that starts or continues a run. If the request is cancelled meanwhile, the
    step still finishes (a thread cannot be interrupted), then the run it touched is cancelled."""
    future = asyncio.ensure_future(sync_to_async(step)())
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # the step's own error is moot now
            outcome = await future  # a new Run, a refusal (no run), or a continued (run_id, round)
            run_id = outcome.run_id if isinstance(outcome, Run) else outcome[0] if isinstance(outcome, tuple) else None
            if run_id is not None:
                await sync_to_async(_cancel_for_request)(subject, run_id)
        raise


def _cancel_for_request(subject: Subject, run_id: str) -> None:
    with contextlib.suppress(Conflict, NotFound):  # it ended (or vanished) first: nothing to cancel
        run_cancel(subject=subject, run_id=run_id, reason=REQUEST_CANCELLED_REASON)


def _call_start(exchange: Exchange, name: str, arguments: dict[str, Any]) -> Run | dict[str, Any]:
    """Refuse what this client could never finish, then create the run; returns it as committed
    (settled, when its nodes were instant)."""
    subject = exchange.subject
    try:
        workflow = workflow_get_readable_cached(subject=subject, workflow_id=name)
    except NotFound:
        raise invalid_params(f"Unknown tool: {name}") from None
    refusal = _capability_refusal(exchange, workflow, arguments)
    if refusal is not None:
        return refusal
    trace = exchange.trace
    try:
        run = run_create(
            subject=subject,
            workflow_id=name,
            inputs=arguments,
            transport=RunTransport.MCP,
            traceparent=trace.traceparent if trace is not None else None,
            tracestate=trace.tracestate if trace is not None else None,
            # The call waits for the run's answer anyway: its instant nodes run here and the run
            # commits once, settled (a quick tool is answered before the first read, and with tasks
            # before TASK_GRACE_SECONDS whatever the broker's latency); a waiting node goes to the
            # queue. Inside this `_owned` step: a client that left meanwhile gets its run cancelled.
            inline=True,
            workflow=workflow,
        )
    except OpenWopError as exc:
        raise mcp_error_from(exc) from None
    return run


async def _call_start_settled(exchange: Exchange, name: str, arguments: dict[str, Any]) -> Run | dict[str, Any] | None:
    """`_call_start` on the event loop for a run that settles in memory: the workflow from the
    process cache, the run committed in one statement (`run_create_settled`). None: not a run
    this path takes (nothing was written); `_call_start` serves it."""
    subject = exchange.subject
    tenant_pk = subject.tenant_pk
    if tenant_pk is None:
        return None
    try:
        workflow = await acached(
            TOPIC_CARD,
            ("workflow", tenant_pk, name),
            lambda: sync_to_async(workflow_get_readable_cached)(subject=subject, workflow_id=name),  # on a miss only
        )
    except NotFound:
        raise invalid_params(f"Unknown tool: {name}") from None
    refusal = _capability_refusal(exchange, workflow, arguments)
    if refusal is not None:
        return refusal
    trace = exchange.trace
    try:
        return await run_create_settled(
            subject=subject,
            workflow=workflow,
            inputs=arguments,
            transport=RunTransport.MCP,
            traceparent=trace.traceparent if trace is not None else None,
            tracestate=trace.tracestate if trace is not None else None,
        )
    except OpenWopError as exc:
        raise mcp_error_from(exc) from None


def _capability_refusal(exchange: Exchange, workflow: Workflow, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """Before any run exists: input this client cannot give is refused, never half-started.

    First the `Mcp-Param-*` headers of the tool's `x-mcp-header` parameters must mirror the
    arguments (SEP-2243; -32020, HTTP 400, like the other routing headers). A tool whose task
    support is `required` needs the tasks extension declared (-32021 naming it); a sampling or
    roots node needs that client capability (-32021). A form interrupt needs declared form
    elicitation (-32021); a credential interrupt needs URL mode, and without it the answer is a
    tool error, never a form fallback (reference a.6). A handshake-era exchange has no MRTR at
    all: any interrupting tool is a tool error there.
    """
    if exchange.param_headers is not None:
        rejection = validate_mcp_param_headers(workflow.input_schema, arguments, exchange.param_headers)
        if rejection is not None:
            raise McpError(rejection.code, rejection.message)
    if workflow.task_support == TaskSupport.REQUIRED and not exchange.tasks_declared:
        if exchange.handshake:
            return tool_error_result(
                f"Tool {workflow.workflow_id} runs only as a task; call it over MCP 2026-07-28 with the "
                f"{TASKS_EXTENSION} extension."
            )
        raise missing_capability({"extensions": {TASKS_EXTENSION: {}}})
    kinds = definition_kinds(workflow.definition)
    for kind, capability in CLIENT_CAPABILITY_BY_KIND.items():
        if kind in kinds and not isinstance(exchange.capabilities.get(capability), dict):
            raise missing_capability({capability: {}})
    if exchange.handshake and kinds & {"approval", "input", "credential"}:
        return tool_error_result(
            f"Tool {workflow.workflow_id} may ask for approval, input or an account connection, which MCP "
            f"{exchange.version} cannot carry here; call it over MCP 2026-07-28 or the OpenWOP API."
        )
    if "credential" in kinds and not exchange.elicitation_url:
        return tool_error_result(
            f"Tool {workflow.workflow_id} needs an account connection; this client did not declare "
            "URL-mode elicitation."
        )
    if kinds & {"approval", "input"} and not exchange.elicitation_form:
        raise missing_capability({"elicitation": {"form": {}}})
    return None


def _call_continue(
    exchange: Exchange, name: str, arguments: dict[str, Any], token: Any, params: dict[str, Any]
) -> tuple[str, int]:
    """An MRTR retry: verify the state, resolve the interrupts it asked (one, or a parallel
    node's several) with the answers given and spend the state, in one transaction: an answer
    that fails (the database refusing it, say) leaves the state unspent, so the client can retry
    it. A retry that resolves nothing still spends it (single use)."""
    subject = exchange.subject
    state = request_state_open(token=token, subject=subject, tool=name, arguments=arguments)
    try:
        snapshot = snapshot_read_sync(tenant_pk=subject_tenant_pk(subject), run_id=state.run_id, artifacts=False)
    except NotFound:
        raise invalid_request_state() from None
    asked = [i for i in snapshot.open_interrupts if i.interrupt_id in state.interrupt_ids]
    answers = answers_of(asked, params.get("inputResponses"))
    if answers:
        try:
            interrupts_resolve(
                subject=subject,
                run_id=state.run_id,
                resolutions=answers,
                inline=True,
                records=lambda _run: request_state_redeem(subject=subject, state=state),
            )
            return state.run_id, state.round
        except (Conflict, ValidationFailed, Forbidden):
            pass  # resolved elsewhere first, a refused answer or answerer: the run's state says which
    request_state_redeem(subject=subject, state=state)
    return state.run_id, state.round


async def _answer(
    exchange: Exchange, name: str, arguments: dict[str, Any], run_id: str, round: int, *, committed: Run | None = None
) -> dict[str, Any]:
    """`committed`: the run as its creation committed it. A run committed terminal never changes
    again, so it is answered without reading it back."""
    subject = exchange.subject
    if committed is not None and committed.is_terminal:
        return await atool_result_of(committed)
    # A tool that gathers its input first (`inputBeforeTask` in its definition) asks by MRTR on
    # the first round even when the call declared tasks, and becomes a task only once answered
    # (SEP-2663: MRTR, then CreateTaskResult on the final round).
    gather_first = round == 0 and committed is not None and bool((committed.definition or {}).get("inputBeforeTask"))
    try:
        if exchange.tasks_declared and not gather_first:
            snapshot = await _terminal_within(subject, run_id, TASK_GRACE_SECONDS)
            run = snapshot.run
            if run.is_terminal:
                return snapshot_tool_result(snapshot)
            ttl_ms = await arun_ttl_ms(run.tenant_id)
            doc = task_doc(run, open_interrupts=(), form=False, url=False, detailed=False, ttl_ms=ttl_ms)
            return {"resultType": "task", **doc, "_meta": server_meta({RUN_ID_META_KEY: run.run_id})}
        snapshot = await run_read(subject, run_id)
        if not _settled(snapshot):
            snapshot = await run_wait(subject=subject, run_id=run_id, settled=_settled)
    except asyncio.CancelledError:
        await asyncio.shield(sync_to_async(_cancel_for_request)(subject, run_id))
        raise
    except OpenWopError as exc:
        raise mcp_error_from(exc) from None
    run = snapshot.run
    if run.is_terminal:
        return snapshot_tool_result(snapshot)
    requests = input_requests(
        snapshot.open_interrupts,
        form=exchange.elicitation_form,
        url=exchange.elicitation_url,
        client=exchange.capabilities,
    )
    if requests is None:
        return tool_error_result("The run needs input this client cannot provide; it is still waiting.")
    max_rounds = (await sync_to_async(facet_ensure)(protocol="mcp")).mrtr_max_rounds
    if round + 1 > max_rounds:
        raise mrtr_rounds_exceeded(max_rounds)
    state = request_state_mint(
        subject=subject,
        tool=name,
        arguments=arguments,
        run_id=run.run_id,
        interrupt_ids=list(requests),
        round=round + 1,
    )
    return {
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": state,
        "_meta": server_meta({RUN_ID_META_KEY: run.run_id}),
    }


async def _terminal_within(subject: Subject, run_id: str, seconds: float) -> RunSnapshot:
    """The run once terminal, or as it stands after `seconds` (whatever it is waiting for)."""
    # One read first: a run advanced inline has usually ended already, and subscribing to its
    # wake-ups (a channel-layer round trip each way) would be wasted.
    snapshot = await run_read(subject, run_id)
    if snapshot.run.is_terminal:
        return snapshot
    try:
        return await asyncio.wait_for(
            run_wait(subject=subject, run_id=run_id, settled=lambda snapshot: snapshot.run.is_terminal), seconds
        )
    except TimeoutError:
        return await run_read(subject, run_id)


def _settled(snapshot: RunSnapshot) -> bool:
    run = snapshot.run
    return run.is_terminal or (run.status in _ANSWERABLE_WAITS and snapshot.open_interrupt is not None)
