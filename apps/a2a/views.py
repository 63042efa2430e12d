"""The A2A 1.0 bindings: the public agent card, JSON-RPC and HTTP+JSON (REST).

Every exchange on an interface URL runs the same three steps before dispatch: authenticate (the
bearer key's Subject; one fixed refusal for every bad credential), negotiate (`operations.call_open`
writes the `negotiation.decided` record, refusals included), then parse and dispatch to
operations.py. Every answer is JSON-RPC shaped or `google.rpc.Status`; the OpenWOP envelope never
appears here (interop.md §A2A error details), and these paths are outside its middleware
(apps.core.protocol.NOT_ENVELOPED_PREFIXES).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
)
from a2a.utils.proto_utils import parse_params
from asgiref.sync import sync_to_async
from django.core.handlers.exception import response_for_exception
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.utils.http import http_date
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from apps.a2a import operations
from apps.a2a.card import acard_document_cached
from apps.a2a.errors import (
    AUTHENTICATE_HEADER,
    AuthenticationRequired,
    InsufficientScope,
    RateLimitExceeded,
    error_row,
    invalid_input,
    invalid_params,
    jsonrpc_error_body,
    rest_error_body,
)
from apps.a2a.operations import OPERATIONS, Call, StreamPlan, TaskDoc
from apps.a2a.selectors import card_path_configured
from apps.a2a.signing import jwks_document
from apps.a2a.streams import Frame, jsonrpc_frame, rest_frame, task_stream
from apps.a2a.wire import request_check, request_doc_check
from apps.core.api_errors import data_error_refusal
from apps.core.caller_input import caller_text_check
from apps.core.errors import ValidationFailed
from apps.core.ids import unproject_id
from apps.core.json_limits import json_loads_limited, request_json
from apps.core.logformat import log_bind
from apps.core.overload import is_overload
from apps.core.sse import sse_response
from apps.oauth.challenge import aoauth_door_state, bearer_challenge
from apps.runs.a2a_wire import to_wire

logger = logging.getLogger(__name__)

JSON_MEDIA_TYPES = ("application/json", "application/a2a+json")
REST_MEDIA_TYPE = "application/a2a+json"  # v1.0.1 §11 (the map's pinned release)
CARD_MAX_AGE = 60


# ---------------------------------------------------------------------------------------------
# Authenticate, negotiate


def _requested_version(request: HttpRequest) -> str | None:
    requested = request.headers.get("A2A-Version") or request.GET.get("A2A-Version") or None
    return requested.strip() if requested else None


async def _call_of(request: HttpRequest, a2a_tenant: str | None = None) -> Call:
    """The exchange's Call (operations.call_open); `a2a_tenant`: a routed operation's `tenant: R`."""
    return await operations.call_open(
        authorization=request.headers.get("Authorization"),
        requested=_requested_version(request),
        origin=request.headers.get("Origin"),
        a2a_tenant=a2a_tenant,
    )


def _media_type_ok(request: HttpRequest) -> bool:
    content_type = request.content_type or ""
    return not request.body or content_type in JSON_MEDIA_TYPES or content_type.endswith("+json")


async def _challenged(request: HttpRequest, response: JsonResponse) -> JsonResponse:
    """A 401 on a host with an OAuth lane names the host's RFC 9728 metadata (identity.md §2.5),
    with `error="invalid_token"` when a credential was presented."""
    if response.status_code != 401:
        return response
    state = await aoauth_door_state()
    if state.enabled:
        presented = bool((request.headers.get("Authorization") or "").strip())
        response["WWW-Authenticate"] = bearer_challenge(
            metadata_url=state.host_metadata_url, presented=presented, scopes=state.scopes_of("a2a")
        )
    return response


# ---------------------------------------------------------------------------------------------
# Parse and answer: the steps both bindings share


def _parse_params(message_type: type[ProtoMessage], params: Any) -> ProtoMessage:
    """The request's proto, with what no column or wire type can hold refused as invalid params
    (wire.request_doc_check / request_check)."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params("params must be an object.", field="params")
    try:
        request_doc_check(params, message_type.DESCRIPTOR)
        message = json_format.ParseDict(params, message_type(), ignore_unknown_fields=True)
        request_check(message, structs=False)
    except ValidationFailed as exc:
        raise invalid_input(exc) from None
    except json_format.ParseError as exc:
        raise invalid_params(f"params do not match {message_type.__name__}: {exc}", field="params") from None
    return message


def _result_doc(result: Any) -> Any:
    if isinstance(result, TaskDoc):
        return result.doc
    doc = to_wire(result)
    if isinstance(result, ListTasksResponse):
        # nextPageToken, pageSize and totalSize are always present ("" on the last page).
        doc.setdefault("tasks", [])
        doc.setdefault("nextPageToken", "")
        doc.setdefault("pageSize", result.page_size)
        doc.setdefault("totalSize", result.total_size)
    return doc


def _error_response(error: A2AError, body: dict[str, Any], status: int) -> JsonResponse:
    response = JsonResponse(body, status=status)
    if isinstance(error, AuthenticationRequired):
        response["WWW-Authenticate"] = AUTHENTICATE_HEADER
    elif isinstance(error, InsufficientScope):
        response["WWW-Authenticate"] = error.challenge
    elif isinstance(error, RateLimitExceeded):
        response["Retry-After"] = str(error.retry_after)
    return response


# Errors the JSON-RPC binding answers with their row's HTTP status, not 200: a refused credential
# (401, or 403, RFC 6750 §3.1) and a spent budget (429 + Retry-After, as before dispatch: refusals.py).
_RPC_HTTP_STATUS = (AuthenticationRequired, InsufficientScope, RateLimitExceeded)


def _rpc_error(error: A2AError, request_id: Any) -> JsonResponse:
    # 200 for every other error, as on HTTP+JSON.
    status = error_row(error).http_status if isinstance(error, _RPC_HTTP_STATUS) else 200
    return _error_response(error, jsonrpc_error_body(error, request_id), status)


def _rest_error(error: A2AError) -> JsonResponse:
    status, body = rest_error_body(error)
    return _error_response(error, body, status)


async def _answer(
    request: HttpRequest,
    dispatch: Callable[[], Awaitable[Any]],
    *,
    binding: str,
    refused: Callable[[A2AError], JsonResponse],
    answered: Callable[[Any], HttpResponseBase],
    frame: Frame,
) -> HttpResponseBase:
    """The dispatched exchange's answer in the binding's wire: its result (a stream plan as SSE
    framed by `frame`), or its error."""
    try:
        result = await dispatch()
    except A2AError as error:
        return await _challenged(request, refused(error))
    except DataError as exc:  # a value the database refused that no parse step caught
        return refused(invalid_input(data_error_refusal(exc)))
    except Exception as exc:
        if is_overload(exc):
            raise  # 503 + Retry-After in this binding's wire (RequestLimitsMiddleware.process_exception)
        # The request's log scope names its tenant, operation and task (apps/core/logformat.py).
        logger.exception("a2a %s: unhandled error", binding)
        return refused(InternalError())
    if not isinstance(result, StreamPlan):
        return answered(_result_doc(result))
    return sse_response(
        task_stream(
            run=result.run,
            first=result.first,
            position=result.position,
            frame=frame,
            end_when_interrupted=result.end_when_interrupted,
        )
    )


# ---------------------------------------------------------------------------------------------
# JSON-RPC

# The operations whose `tenant` selects an agent (operations.call_routed).
ROUTED_RPC_METHODS = frozenset(name for name, operation in OPERATIONS.items() if operation.routed)


def _rpc_routed_tenant(body: Any) -> str | None:
    """A routed JSON-RPC call's `params.tenant` ("" when it names none), else None."""
    method = body.get("method") if isinstance(body, dict) else None
    if not isinstance(method, str) or method not in ROUTED_RPC_METHODS:  # a list is not hashable
        return None
    params = body.get("params")
    tenant = params.get("tenant") if isinstance(params, dict) else None
    return tenant if isinstance(tenant, str) else ""


def _rpc_id(body: Any) -> Any:
    """The request id to echo: a string or integer (never a bool), else null."""
    if isinstance(body, dict):
        value = body.get("id")
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return None


@csrf_exempt
async def jsonrpc_endpoint(request: HttpRequest) -> HttpResponseBase:
    """POST the card's JSONRPC url (with or without a trailing slash; never a redirect)."""
    body: Any = None
    parse_failed = False
    try:
        body = request_json(request)
    except (ValueError, UnicodeDecodeError):
        parse_failed = True
    request_id = _rpc_id(body)

    async def dispatch() -> Any:
        call = await _call_of(request, _rpc_routed_tenant(body))
        if request.method != "POST":
            raise InvalidRequestError("JSON-RPC requests are POSTed.")
        if not _media_type_ok(request):
            raise ContentTypeNotSupportedError(f"Content-Type {request.content_type!r} is not JSON.")
        if parse_failed:
            raise JSONParseError("The body is not valid JSON.")
        if not isinstance(body, dict):
            raise InvalidRequestError("A JSON-RPC request is one object; batches are not supported.")
        if body.get("jsonrpc") != "2.0":
            raise InvalidRequestError("'jsonrpc' must be exactly '2.0'.")
        method = body.get("method")
        if not isinstance(method, str):
            raise InvalidRequestError("'method' must be a string.")
        if "id" in body and body["id"] is not None and request_id is None:
            raise InvalidRequestError("'id' must be a string, a number or null.")
        if method not in OPERATIONS:
            # 0.3 names (message/send, tasks/get, ...) included: this interface serves 1.0 only.
            raise MethodNotFoundError(f"Method {method[:100]!r} is not served.")
        operation = OPERATIONS[method]
        log_bind(operation=method)  # the request's log lines name what it asked (and its ids, below)
        params = _parse_params(operation.request, body.get("params"))
        log_bind(**operations.logged_ids(params))
        # GetTask answers its kept wire form (operations.get_task_doc), not a proto to project.
        run = operations.get_task_doc if method == "GetTask" else operation.run
        return await run(call, params)

    return await _answer(
        request,
        dispatch,
        binding="jsonrpc",
        refused=lambda error: _rpc_error(error, request_id),
        answered=lambda doc: JsonResponse({"jsonrpc": "2.0", "id": request_id, "result": doc}),
        frame=jsonrpc_frame(request_id),
    )


# ---------------------------------------------------------------------------------------------
# HTTP+JSON


def _task_id(raw: str) -> str:
    """A task id in a path: raw `tenant/opaque` (and `%2F`, which the server decodes to `/`) or
    the `~2F` projection. An undecodable one is simply an id no task has (TaskNotFound); one
    holding a NUL (`%00`) is no id at all (invalid params, as in a body)."""
    try:
        caller_text_check(raw, field="id")
    except ValidationFailed as exc:
        raise invalid_input(exc) from None
    if "~" not in raw and "%" not in raw:
        return raw
    try:
        return unproject_id(raw)
    except ValidationFailed:
        return raw


def _body(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    if not _media_type_ok(request):
        raise ContentTypeNotSupportedError(f"Content-Type {request.content_type!r} is not JSON.")
    try:
        body = json_loads_limited(request.body)
    except (ValueError, UnicodeDecodeError):
        raise JSONParseError("The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("The body must be a JSON object.")
    return body


def _query(request: HttpRequest, message: ProtoMessage) -> ProtoMessage:
    try:
        # The last value of each parameter is the one parse_params keeps.
        request_doc_check({key: request.GET[key] for key in request.GET}, message.DESCRIPTOR, field="query")
        parse_params(request.GET, message)  # type: ignore[arg-type]
        request_check(message, field="query", structs=False)
    except ValidationFailed as exc:
        raise invalid_input(exc) from None
    except json_format.ParseError as exc:
        raise invalid_params(f"Query parameters do not match {type(message).__name__}: {exc}", field="query") from None
    return message


RestHandler = Callable[[Call, HttpRequest, str, str], Awaitable[Any]]


async def _rest_send(call: Call, request: HttpRequest, task_ref: str, tenant: str, *, streaming: bool = False) -> Any:
    params = _parse_params(SendMessageRequest, _body(request))
    params.tenant = tenant or params.tenant
    return await operations.send_message(call, params, streaming=streaming)


async def _rest_stream(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    return await _rest_send(call, request, task_ref, tenant, streaming=True)


async def _rest_list(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    return await operations.list_tasks(call, _query(request, ListTasksRequest()))


async def _rest_get(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    params = _query(request, GetTaskRequest())
    params.id = _task_id(task_ref)
    return await operations.get_task_doc(call, params)


async def _rest_cancel(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    params = _parse_params(CancelTaskRequest, _body(request))
    params.id = _task_id(task_ref)
    return await operations.cancel_task(call, params)


async def _rest_subscribe(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    return await operations.subscribe(call, SubscribeToTaskRequest(id=_task_id(task_ref)))


async def _rest_push(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    """`/tasks/{id}/pushNotificationConfigs[/{configId}]`: POST create, GET list or get, DELETE."""
    task_id = _task_id(task_ref)
    _, _, config_id = request.path.rpartition("/pushNotificationConfigs")
    config_id = config_id.removeprefix("/")
    if request.method == "POST" and not config_id:
        params = _parse_params(TaskPushNotificationConfig, _body(request))
        params.task_id = task_id
        return await operations.push_config_create(call, params)
    if request.method == "GET" and not config_id:
        listed = _query(request, ListTaskPushNotificationConfigsRequest())
        listed.task_id = task_id
        return await operations.push_config_list(call, listed)
    if request.method == "GET":
        got = GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        return await operations.push_config_get(call, got)
    if request.method == "DELETE" and config_id:
        deleted = DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        return await operations.push_config_delete(call, deleted)
    raise MethodNotFoundError(f"No A2A operation at {request.method} pushNotificationConfigs.")


async def _rest_extended_card(call: Call, request: HttpRequest, task_ref: str, tenant: str) -> Any:
    return await operations.get_extended_card(call, GetExtendedAgentCardRequest(tenant=tenant))


# The proto's google.api.http paths, relative to the interface url (A2A §11). Order matters: the
# push-config and verb suffixes are matched before a bare task id, which may itself hold a `/`.
REST_ROUTES: list[tuple[frozenset[str], re.Pattern[str], RestHandler]] = [
    (frozenset({"POST"}), re.compile(r"^message:send$"), _rest_send),
    (frozenset({"POST"}), re.compile(r"^message:stream$"), _rest_stream),
    (frozenset({"GET"}), re.compile(r"^tasks$"), _rest_list),
    (
        frozenset({"GET", "POST", "DELETE"}),
        re.compile(r"^tasks/(?P<task>.+)/pushNotificationConfigs(?:/[^/]+)?$"),
        _rest_push,
    ),
    (frozenset({"POST"}), re.compile(r"^tasks/(?P<task>.+):cancel$"), _rest_cancel),
    (frozenset({"GET", "POST"}), re.compile(r"^tasks/(?P<task>.+):subscribe$"), _rest_subscribe),
    (frozenset({"GET"}), re.compile(r"^tasks/(?P<task>.+)$"), _rest_get),
    (frozenset({"GET"}), re.compile(r"^extendedAgentCard$"), _rest_extended_card),
]


def _rest_route(method: str, route: str) -> tuple[RestHandler, str, str]:
    """(handler, task ref, tenant). The HTTP+JSON binding carries `tenant` as a leading path
    segment (`/{tenant}/message:send`, A2A §11). A route without one is matched first; otherwise
    the shortest prefix that leaves a known route is the tenant, so a malformed tenant holding a
    decoded `/` still reaches the operation and gets the same answer as any unknown tenant."""
    prefixed = ((route[:at], route[at + 1 :]) for at, char in enumerate(route) if char == "/" and at > 0)
    for tenant, rest in itertools.chain([("", route)], prefixed):
        for methods, pattern, handler in REST_ROUTES:
            match = pattern.match(rest)
            if match and method in methods:
                return handler, match.groupdict().get("task") or "", tenant
    raise MethodNotFoundError(f"No A2A operation at {method} {route[:100]!r}.")


def _rest_routed_tenant(method: str, route: str) -> str | None:
    """A routed HTTP+JSON operation's tenant segment ("" when none), else None (an unknown route
    too: it is answered after authentication)."""
    try:
        handler, _, tenant = _rest_route(method, route)
    except MethodNotFoundError:
        return None
    return tenant if handler in (_rest_send, _rest_stream, _rest_extended_card) else None


@csrf_exempt
async def rest_endpoint(request: HttpRequest, route: str) -> HttpResponseBase:
    """Everything under the card's HTTP+JSON url; errors are google.rpc.Status (A2A §11.6)."""

    async def dispatch() -> Any:
        call = await _call_of(request, _rest_routed_tenant(request.method or "GET", route))
        handler, task_ref, tenant = _rest_route(request.method or "GET", route)
        request._openwop_rest_operation = handler.__name__  # type: ignore[attr-defined]  # metrics' label
        log_bind(operation=f"rest:{handler.__name__}", task_id=task_ref)  # the metrics' label, in its log lines
        return await handler(call, request, task_ref, tenant)

    return await _answer(
        request,
        dispatch,
        binding="rest",
        refused=_rest_error,
        answered=lambda doc: HttpResponse(json.dumps(doc, separators=(",", ":")), content_type=REST_MEDIA_TYPE),
        frame=rest_frame,
    )


@csrf_exempt
async def a2a_unknown(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Any other path under /a2a: the card when an operator moved it here (`/a2a/...` never
    reaches the root catch-all), else a Status, never Django's HTML page or the OpenWOP envelope."""
    if request.path == await sync_to_async(card_path_configured)():
        return await agent_card(request)
    return _rest_error(MethodNotFoundError(f"No A2A interface at {request.path[:100]!r}."))


# ---------------------------------------------------------------------------------------------
# The public agent card


def _cacheable(
    request: HttpRequest, body: bytes, etag: str, content_type: str, last_modified: float | None = None
) -> HttpResponse:
    """The public document, or a 304 when `If-None-Match` names its ETag (or `*`); cacheable as
    briefly as the card (a client refetches the JWKS when a card names an unknown kid)."""
    header = request.headers.get("If-None-Match") or ""
    hit = header.strip() == "*" or etag in [c.strip().removeprefix("W/") for c in header.split(",")]
    response = HttpResponse(status=304) if hit else HttpResponse(body, content_type=content_type)
    response["ETag"] = etag
    if last_modified is not None:
        response["Last-Modified"] = http_date(last_modified)
    response["Cache-Control"] = f"public, max-age={CARD_MAX_AGE}"
    return response


@csrf_exempt  # it changes nothing; an unrouted POST stays the plain 404 it was, not a CSRF 403
async def agent_card_at_facet_path(request: HttpRequest, card_path: str) -> HttpResponseBase:
    """The card at a moved `facet.agent_card_path` (card_path_urls.py); any other path that
    reached this catch-all is the 404 it would have been without it."""
    if "/" + card_path != await sync_to_async(card_path_configured)():
        # Django's own answer to an unmatched path (handler404, the debug page under DEBUG), which
        # the protocol middleware then envelopes where it envelopes any 404 page. Raising Http404
        # here instead would reach that middleware as a view exception.
        return response_for_exception(request, Http404())
    return await agent_card(request)


async def agent_card(request: HttpRequest) -> HttpResponseBase:
    """`GET a2a.agentCardUrl`: public. The card is that of preferredVersion whatever `A2A-Version`
    says (interop.md §Legacy profiles are absent); it lists no per-agent routing value."""
    if request.method not in ("GET", "HEAD"):
        refusal = _rest_error(MethodNotFoundError("The agent card is fetched with GET."))
        refusal["Allow"] = "GET, HEAD"
        return refusal
    # Built once per change of its sources and kept per process (apps/core/invalidation.py).
    body, etag, changed = await acard_document_cached()
    return _cacheable(request, body, etag, "application/json", changed)


# ---------------------------------------------------------------------------------------------
# The JWKS the cards' signatures name (`jku`; apps/a2a/signing.py)


@require_safe
def card_jwks(request: HttpRequest) -> HttpResponseBase:
    """`GET /.well-known/jwks.json`: public, the active key and the retired keys within grace.
    A REST-wire path like `/.well-known/openwop`: its 405 is the OpenWOP envelope's."""
    body, etag = jwks_document()
    return _cacheable(request, body, etag, "application/jwk-set+json")
