"""The A2A operations, binding-agnostic: proto request in, proto result (or a stream plan) out.

Each is the interop map's row for it (openwop-v2 reference (c).1): SendMessage -> createRun or
resolveInterruptByRun, GetTask -> getRun, ListTasks -> listRuns' visibility, CancelTask ->
cancelRun, SubscribeToTask -> streamRunEvents. Every binding (views.py, grpc_server.py) calls these
through `OPERATIONS` and differs only in how it parses and renders. Writes run in `sync_to_async`
calls that end before any wait or stream begins; a task is read by one statement on the event
loop (selectors.task_read).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from asgiref.sync import sync_to_async
from django.conf import settings
from google.protobuf import json_format
from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import Message as ProtoMessage

from apps.a2a.card import A2AFeatures, features_of, served_card_cached
from apps.a2a.errors import AuthenticationRequired, InsufficientScope, invalid_params
from apps.a2a.selectors import task_page, task_read
from apps.a2a.services import (
    agent_skill_resolve,
    message_continue,
    message_start,
    skill_route_enabled,
    skill_workflow_cached,
    task_cancel,
)
from apps.a2a.streams import SETTLED_STATUSES, run_wait_settled
from apps.a2a.tck import TCK_WORKFLOW_ID, tck_route, tck_scenario
from apps.agents.selectors import InventoryEntry, agent_by_a2a_tenant
from apps.core.egress import EgressRefused, egress_check_url
from apps.core.errors import NotFound, OpenWopError, ValidationFailed
from apps.facets.negotiation import Decision, inbound_peer_origin, negotiation_decide_deferred
from apps.facets.policy import TenantFloors, atenant_floors_cached
from apps.facets.services import afacet_cached
from apps.oauth.challenge import OAuthDoorState, aoauth_door_state, insufficient_scope_challenge, scopes_missing
from apps.push import services as push_services
from apps.push.limits import push_backlog_check
from apps.runs.a2a_wire import TERMINAL_STATES, task_from_view, to_wire
from apps.runs.models import Run, RunStatus
from apps.runs.reads import RunRow, RunSnapshot
from apps.runs.services import run_resend_unclaimed
from apps.tenants.selectors import asubject_from_authorization_cached
from apps.tenants.subject import Subject

CONTEXT_ID_MAX = 256


@dataclass(frozen=True, slots=True)
class Call:
    """An authenticated, negotiated exchange; `agent` is the inventory entry its `tenant: R` named."""

    subject: Subject
    features: A2AFeatures
    agent: InventoryEntry | None = None


def version_accepted(decision: Decision) -> None:
    """A refused negotiation as the A2A error every binding answers (-32009 and its rows)."""
    if not decision.accepted:
        raise VersionNotSupportedError(
            f"A2A version {decision.requested!r} is not supported.",
            data={"supportedVersions": ",".join(decision.supported)},
        )


def scopes_granted(subject: Subject, state: OAuthDoorState) -> None:
    """The `a2a` method family's scopes: an access token lacking one its issuer requires is refused
    with InsufficientScope (403 and the scope challenge; gRPC PERMISSION_DENIED)."""
    missing = scopes_missing(state, subject, "a2a")
    if missing:
        challenge = insufficient_scope_challenge(metadata_url=state.host_metadata_url, scopes=missing)
        raise InsufficientScope(scopes=missing, challenge=challenge)


def agent_floor_may_apply(facet: Any, floors: TenantFloors) -> bool:
    """Whether a routed operation's `tenant: R` must be resolved before negotiating, so that the
    exchange's one `negotiation.decided` record applies the agent's floor: per-agent cards served
    and some agent of the caller's tenant holds a floor of its own. The common case reads nothing."""
    return bool(facet.agent_cards) and bool(floors.agents)


def agent_pk_of(subject: Subject, a2a_tenant: str) -> int | None:
    """The agent R names in the caller's inventory (None: negotiate for the tenant; `call_routed`
    refuses an unknown R afterwards, as for every operation)."""
    entry = agent_by_a2a_tenant(subject=subject, a2a_tenant=a2a_tenant)
    return entry.agent.pk if entry is not None else None


async def call_open(
    *, authorization: str | None, requested: str | None, origin: str | None, a2a_tenant: str | None = None
) -> Call:
    """The exchange's Call, for every binding: the Subject (one refusal for every bad credential),
    the facet read once (the decision and the features agree), the decision and its
    `negotiation.decided` record (the caller's host event: an inbound exchange is no run's). Nothing
    leaves the event loop when the caches hit (the Subject, the facet, the tenant's floors); the
    record is group-committed. `a2a_tenant`: a routed operation's `tenant: R` (`Operation.routed`),
    else None; an agent floor of R's is applied by the one decision (`agent_floor_may_apply`)."""
    try:
        subject = await asubject_from_authorization_cached(authorization, door="a2a")
    except OpenWopError:
        raise AuthenticationRequired() from None  # same bytes for missing, malformed, unknown, revoked
    if subject.scopes is not None:  # an access token (API keys carry no scopes: no lookup)
        scopes_granted(subject, await aoauth_door_state())
    facet = await afacet_cached(protocol="a2a")
    agent_pk = None
    if a2a_tenant and agent_floor_may_apply(facet, await atenant_floors_cached(tenant_slug=subject.tenant)):
        agent_pk = await sync_to_async(agent_pk_of)(subject, a2a_tenant)
    decision, recorded = await negotiation_decide_deferred(
        protocol="a2a",
        requested=requested,
        peer_origin=inbound_peer_origin(origin_header=origin, subject=subject),
        subject=subject,
        facet=facet,
        agent_pk=agent_pk,
    )
    await recorded
    version_accepted(decision)
    return Call(subject=subject, features=features_of(facet))


UNKNOWN_TENANT_MESSAGE = "The tenant names no agent of the caller."


def call_routed(call: Call, tenant: str) -> Call:
    """Resolve a routed operation's `tenant: R` (interop.md §Per-agent cards, Non-disclosure): which
    workflow SendMessage starts, which card GetExtendedAgentCard answers; R's agent floor is
    already in `call_open`'s decision. R never selects a tenant: it is looked up in the caller's own
    inventory, and every R outside it (another tenant's, an unpublished agent's, malformed, never
    minted) takes this one path and gets the same -32602, which does not echo R. Every other
    operation ignores `tenant`, the opaque hint interop.md §Isolation makes it, for a valid R and an
    unknown one alike; while per-agent cards are not served, every operation ignores it."""
    if not tenant or not call.features.agent_cards:
        return call
    entry = agent_by_a2a_tenant(subject=call.subject, a2a_tenant=tenant)
    if entry is None:
        raise invalid_params(UNKNOWN_TENANT_MESSAGE, field="tenant")
    return replace(call, agent=entry)


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What a streaming operation hands its binding: the first Task and where the log resumes."""

    run: RunRow
    first: Task
    position: int
    end_when_interrupted: bool


# ---------------------------------------------------------------------------------------------
# Reading a message


def _plain(value: Any) -> Any:
    """Struct numbers are doubles: give integral ones back as ints (workflow inputs are JSON)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _struct(message: ProtoMessage, field: str) -> dict[str, Any]:
    if not message.HasField(field):
        return {}
    return _plain(json_format.MessageToDict(getattr(message, field)))


def _openwop(metadata: dict[str, Any]) -> dict[str, Any]:
    value = metadata.get("openwop")
    return value if isinstance(value, dict) else {}


def _first_data(message: Message) -> Any:
    for part in message.parts:
        if part.HasField("data"):
            return _plain(json_format.MessageToDict(part.data))
    return None


def skill_id_of(request: SendMessageRequest) -> str | None:
    """message.metadata.openwop.skillId, else the request's metadata.openwop.skillId."""
    for metadata in (_struct(request.message, "metadata"), _struct(request, "metadata")):
        skill = _openwop(metadata).get("skillId")
        if skill is not None:
            if not isinstance(skill, str) or not skill:
                raise invalid_params("metadata.openwop.skillId must be a non-empty string.", field="skillId")
            return skill
    return None


def _text_of(message: Message) -> dict[str, Any] | None:
    texts = [part.text for part in message.parts if part.HasField("text")]
    return {"text": "\n".join(texts)} if texts else None


def inputs_of(message: Message) -> dict[str, Any]:
    """The run's inputs: the first data part when it is an object, else the text parts."""
    data = _first_data(message)
    if isinstance(data, dict):
        return data
    return _text_of(message) or {}


def resume_value_of(message: Message) -> Any:
    """metadata.openwop.interrupt, else the first data part (map SendMessage row with taskId), else
    the text parts as `{"text": ...}`, the shape `inputs_of` gives them: a plain-text answer to an
    INPUT_REQUIRED task (what most A2A clients, the TCK included, send) reaches the interrupt, whose
    resumeSchema then accepts or refuses it (-32602)."""
    value = _openwop(_struct(message, "metadata")).get("interrupt")
    if value is not None:
        return value
    data = _first_data(message)
    return data if data is not None else _text_of(message)


def _validated(request: ProtoMessage) -> None:
    try:
        validate_proto_required_fields(request)
    except InvalidParamsError as exc:
        errors = (exc.data or {}).get("errors") or [{"field": "params", "message": "Validation failed."}]
        first = errors[0]
        raise invalid_params(f"{first['field']}: {first['message']}", field=str(first["field"])) from None


# ---------------------------------------------------------------------------------------------
# SendMessage / SendStreamingMessage


async def _snapshot(subject: Subject, run_id: str, history_length: int | None) -> tuple[RunSnapshot, Task]:
    """The task as it is now: one read, and its Task."""
    snapshot = await task_read(subject=subject, task_id=run_id)
    return snapshot, task_from_view(snapshot, history_length=history_length)


def _send_or_replay(call: Call, request: SendMessageRequest, *, inline: bool, records: Callable[[Run], None]) -> Run:
    message = request.message
    if message.task_id:
        return message_continue(
            subject=call.subject,
            task_id=message.task_id,
            message=message,
            resume_value=resume_value_of(message),
            inline=inline,
            records=records,
        )
    if message.context_id and len(message.context_id) > CONTEXT_ID_MAX:
        raise invalid_params(f"contextId is at most {CONTEXT_ID_MAX} characters.", field="message.contextId")
    skill_id = skill_id_of(request)
    inputs = inputs_of(message)
    tck = None
    if call.agent is None and skill_id is None and tck_scenario(message.message_id) is not None:
        # Only a TCK-shaped messageId asks whether the TCK route is enabled (two reads saved on
        # every other message).
        tck = tck_route(message, route_enabled=skill_route_enabled(TCK_WORKFLOW_ID))
    if call.agent is not None:
        workflow_id = agent_skill_resolve(entry=call.agent, skill_id=skill_id)
    elif tck is not None:
        workflow_id, inputs = tck
    else:
        workflow_id = skill_workflow_cached(skill_id)
    # The run is the caller's, in the caller's tenant, whatever `tenant` said (tenant-of-record).
    return message_start(
        subject=call.subject,
        message=message,
        workflow_id=workflow_id,
        inputs=inputs,
        context_id=message.context_id or uuid.uuid4().hex,
        agent_id=call.agent.agent.agent_id if call.agent is not None else None,
        inline=inline,
        records=records,
    )


def _start_sync(call: Call, request: SendMessageRequest, *, inline: bool) -> Run:
    """Create or continue the task (`inline`: settled, run_create), with the request's push config
    registered in the same transaction, before the run's events: its receiver hears every one of
    them, the end of a run settled at once included. A retry (a messageId already sent) answers the
    run it created, re-sent to the workers when none ever claimed it (a run accepted while the
    broker was down starts when the client retries). One thread step: a client that leaves midway
    cancels the await, not the thread."""
    config = None
    if request.configuration.HasField("task_push_notification_config"):
        config = request.configuration.task_push_notification_config
    written: list[Run] = []

    def records(run: Run) -> None:  # called only for a run this request writes
        written.append(run)
        if config is not None:
            _push_call(
                push_services.push_config_attach,
                run=run,
                url=config.url,
                token=config.token or None,
                authentication=_authentication_of(config),
            )

    run = _send_or_replay(call, request, inline=inline, records=records)
    if not any(run is w for w in written):
        run = run_resend_unclaimed(run=run)
    return run


async def send_message(
    call: Call, request: SendMessageRequest, *, streaming: bool = False
) -> SendMessageResponse | StreamPlan:
    _validated(request)
    if request.tenant:  # without one, call_routed has nothing to look up (no thread hop for it)
        call = await sync_to_async(call_routed)(call, request.tenant)
    if streaming and not call.features.streaming:
        raise UnsupportedOperationError("Streaming is not offered by this host.")
    configuration = request.configuration
    immediate = configuration.return_immediately
    if immediate and not call.features.durable_tasks:
        raise UnsupportedOperationError("returnImmediately needs durableTasks, which this host does not offer.")
    if configuration.HasField("task_push_notification_config") and not call.features.push_notifications:
        raise PushNotificationNotSupportedError()
    history_length = configuration.history_length if configuration.HasField("history_length") else None
    if configuration.HasField("task_push_notification_config"):
        # Refuse a bad receiver before any run exists; the config is registered once the run does.
        await sync_to_async(_push_call)(egress_check_url, url=configuration.task_push_notification_config.url)
        await sync_to_async(_push_call)(push_backlog_check, subject=call.subject)  # limits, before the run
    # A blocking send waits for the run anyway: the request runs its instant nodes itself and
    # commits the run once, settled (run_create / interrupt_resolve with `inline`), instead of a
    # Celery round trip. Streaming and returnImmediately keep the queue (their clients see the run
    # progress from elsewhere).
    inline = not streaming and not immediate
    # One thread step starts the run; the run comes back as committed (settled, usually).
    run = await sync_to_async(_start_sync)(call, request, inline=inline)
    # A blocking send waits for an unsettled run, unless no message reached the workers (the broker
    # is down: runs.services.advance_send): nothing advances the run before the sweeper or a retry
    # sends it, so answer it as committed now.
    if inline and run.status not in SETTLED_STATUSES and not (run.enqueued_at is None and not run.lease_owner):
        await run_wait_settled(run)
    snapshot, task = await _snapshot(call.subject, run.run_id, history_length)
    if streaming:
        return StreamPlan(run=snapshot.run, first=task, position=snapshot.run.last_sequence, end_when_interrupted=True)
    return SendMessageResponse(task=task)


# ---------------------------------------------------------------------------------------------
# Tasks


async def get_task(call: Call, request: GetTaskRequest) -> Task:
    _, task = await _snapshot(call.subject, request.id, _history_length(request))
    return task


@dataclass(frozen=True, slots=True)
class TaskDoc:
    """A Task already in its wire form (`wire.to_wire(task)`): answered as is, never modified."""

    doc: dict[str, Any]


# The wire form of a Task is a pure function of its snapshot (and historyLength), and every change
# to what a Task shows saves its run (a new `updated_at`): a task polled again without a change
# projects to the same document, so the projection is kept, keyed by the row's version. The read
# itself (and so isolation and freshness) happens on every request; only the protobuf round trip
# of an unchanged task is skipped. Bounded in entries; a task with many Messages or artifacts is
# not kept.
_PROJECTIONS_MAX = 4096
_PROJECTION_MAX_PARTS = 16
_projections: dict[tuple[Any, ...], TaskDoc] = {}


async def get_task_doc(call: Call, request: GetTaskRequest) -> TaskDoc:
    """GetTask in wire form, for the JSON bindings."""
    history_length = _history_length(request)
    snapshot = await task_read(subject=call.subject, task_id=request.id)
    run = snapshot.run
    key = (run.tenant_id, run.run_id, run.updated_at, run.last_sequence, run.status, history_length,
           len(snapshot.documents), len(snapshot.artifacts))  # fmt: skip
    kept = _projections.get(key)
    if kept is not None:
        return kept
    doc = TaskDoc(to_wire(task_from_view(snapshot, history_length=history_length)))
    if len(snapshot.documents) + len(snapshot.artifacts) <= _PROJECTION_MAX_PARTS:
        if len(_projections) >= _PROJECTIONS_MAX:
            del _projections[next(iter(_projections))]  # the oldest kept
        _projections[key] = doc
    return doc


def _history_length(request: GetTaskRequest | ListTasksRequest) -> int | None:
    history_length = request.history_length if request.HasField("history_length") else None
    if history_length is not None and history_length < 0:
        raise invalid_params("historyLength must not be negative.", field="historyLength")
    return history_length


async def list_tasks(call: Call, request: ListTasksRequest) -> ListTasksResponse:
    history_length = _history_length(request)
    include_artifacts = request.include_artifacts  # unset: False
    status_after = (
        request.status_timestamp_after.ToDatetime(tzinfo=dt.UTC) if request.HasField("status_timestamp_after") else None
    )
    page = await task_page(
        subject=call.subject,
        context_id=request.context_id or None,
        state=request.status or None,
        status_after=status_after,
        page_size=request.page_size if request.HasField("page_size") else None,
        page_token=request.page_token or None,
        include_artifacts=include_artifacts,
    )
    response = ListTasksResponse(
        next_page_token=page.next_page_token, page_size=page.page_size, total_size=page.total_size
    )
    for view in page.views:
        response.tasks.append(task_from_view(view, history_length=history_length, include_artifacts=include_artifacts))
    return response


async def cancel_task(call: Call, request: CancelTaskRequest) -> Task:
    """CancelTask answers the task cancelled: a running run only moves to `cancelling` here, and
    its worker commits the cancel at its next check (~100 ms from inside a waiting node), so the
    answer waits for that, on the run's wake-ups, at most OPENWOP_A2A_CANCEL_WAIT_SECONDS. Past the
    bound it answers what is true then (WORKING, the cancel still pending: a worker busy in a node
    that does not check, or none alive)."""
    run = await sync_to_async(task_cancel)(subject=call.subject, task_id=request.id)
    if run.status == RunStatus.CANCELLING:
        await run_wait_settled(run, timeout=settings.OPENWOP_A2A_CANCEL_WAIT_SECONDS)
    _, task = await _snapshot(call.subject, run.run_id, None)
    return task


async def subscribe(call: Call, request: SubscribeToTaskRequest) -> StreamPlan:
    """A read-only reattach: never re-executes or re-accepts (map SubscribeToTask row)."""
    if not (call.features.streaming and call.features.durable_tasks):
        raise UnsupportedOperationError("SubscribeToTask needs streaming and durableTasks.")
    snapshot, first = await _snapshot(call.subject, request.id, None)
    if first.status.state in TERMINAL_STATES:
        raise UnsupportedOperationError("The task is terminal; there is nothing to subscribe to.")
    return StreamPlan(run=snapshot.run, first=first, position=snapshot.run.last_sequence, end_when_interrupted=False)


async def get_extended_card(call: Call, request: GetExtendedAgentCardRequest) -> AgentCard:
    """`tenant: R` -> the agent's card; no tenant -> the host card, equal to the public one.
    -32007 while per-agent cards are not served (capabilities.extendedAgentCard is then false on
    the public card). Signed once per card version and kept per process (apps/a2a/card.py)."""
    if not call.features.agent_cards:
        raise ExtendedAgentCardNotConfiguredError()
    call = await sync_to_async(call_routed)(call, request.tenant)
    return await sync_to_async(served_card_cached)(subject=call.subject, entry=call.agent)


# --- push-config methods: translation to apps.push services (interop.md §A2A push delivery) ---


def _push_features(call: Call) -> None:
    # Map: all four push-config methods answer -32003 while a2a.pushNotifications is unadvertised.
    if not call.features.push_notifications:
        raise PushNotificationNotSupportedError()


def _push_call(operation: Any, **kwargs: Any) -> Any:
    """Run one push service; an unreadable task and a foreign or unknown configId are one
    TaskNotFoundError (identical bytes), a refused URL or bad authentication is invalid params."""
    try:
        return operation(**kwargs)
    except NotFound:
        raise TaskNotFoundError() from None
    except EgressRefused as exc:
        raise invalid_params(exc.message, field="url") from None
    except ValidationFailed as exc:
        raise invalid_params(exc.message, field="authentication") from None


def _authentication_of(config: TaskPushNotificationConfig) -> dict[str, Any] | None:
    if not config.HasField("authentication"):
        return None
    return {"scheme": config.authentication.scheme, "credentials": config.authentication.credentials}


def _push_wire(operation: Any, **kwargs: Any) -> TaskPushNotificationConfig:
    """One push service's config in its wire form, on the service's thread (the form reads its run)."""
    return push_services.push_config_wire(_push_call(operation, **kwargs))


async def push_config_create(call: Call, request: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    _push_features(call)
    return await sync_to_async(_push_wire)(
        push_services.push_config_create,
        subject=call.subject,
        task_id=request.task_id,
        url=request.url,
        token=request.token or None,
        authentication=_authentication_of(request),
    )


async def push_config_get(call: Call, request: GetTaskPushNotificationConfigRequest) -> TaskPushNotificationConfig:
    _push_features(call)
    return await sync_to_async(_push_wire)(
        push_services.push_config_get, subject=call.subject, task_id=request.task_id, config_id=request.id
    )


async def push_config_list(
    call: Call, request: ListTaskPushNotificationConfigsRequest
) -> ListTaskPushNotificationConfigsResponse:
    _push_features(call)

    def listed() -> ListTaskPushNotificationConfigsResponse:
        configs = _push_call(push_services.push_config_list, subject=call.subject, task_id=request.task_id)
        return ListTaskPushNotificationConfigsResponse(configs=[push_services.push_config_wire(c) for c in configs])

    return await sync_to_async(listed)()


async def push_config_delete(call: Call, request: DeleteTaskPushNotificationConfigRequest) -> Empty:
    _push_features(call)
    await sync_to_async(_push_call)(
        push_services.push_config_delete, subject=call.subject, task_id=request.task_id, config_id=request.id
    )
    return Empty()


# ---------------------------------------------------------------------------------------------
# The operations by A2A method name: every binding dispatches through this one table (views.py's
# JSON-RPC by `method`, grpc_server.py's servicer by RPC name; HTTP+JSON routes by path).


def logged_ids(request: ProtoMessage) -> dict[str, str]:
    """The ids a request names, for its log lines (apps/core/logformat.py): the task's, and a push
    config's (a push-config request's `id` is the config's; any other request's `id` is the task's)."""
    if isinstance(request, SendMessageRequest):
        return {"task_id": request.message.task_id}
    fields = {field.name for field in request.DESCRIPTOR.fields}
    named = (("task_id", "task_id"), ("config_id", "id")) if "task_id" in fields else (("task_id", "id"),)
    return {key: str(getattr(request, field)) for key, field in named if field in fields}


@dataclass(frozen=True, slots=True)
class Operation:
    request: type[ProtoMessage]
    run: Callable[[Call, Any], Awaitable[Any]]
    streaming: bool = False  # answers a StreamPlan: SSE, or a gRPC server stream
    routed: bool = False  # its `tenant: R` selects an agent (call_routed), so call_open is given R


OPERATIONS: dict[str, Operation] = {
    "SendMessage": Operation(SendMessageRequest, send_message, routed=True),
    "SendStreamingMessage": Operation(
        SendMessageRequest, partial(send_message, streaming=True), streaming=True, routed=True
    ),
    "GetTask": Operation(GetTaskRequest, get_task),
    "ListTasks": Operation(ListTasksRequest, list_tasks),
    "CancelTask": Operation(CancelTaskRequest, cancel_task),
    "SubscribeToTask": Operation(SubscribeToTaskRequest, subscribe, streaming=True),
    "CreateTaskPushNotificationConfig": Operation(TaskPushNotificationConfig, push_config_create),
    "GetTaskPushNotificationConfig": Operation(GetTaskPushNotificationConfigRequest, push_config_get),
    "ListTaskPushNotificationConfigs": Operation(ListTaskPushNotificationConfigsRequest, push_config_list),
    "DeleteTaskPushNotificationConfig": Operation(DeleteTaskPushNotificationConfigRequest, push_config_delete),
    "GetExtendedAgentCard": Operation(GetExtendedAgentCardRequest, get_extended_card, routed=True),
}
