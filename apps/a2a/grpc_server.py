"""The A2A 1.0 gRPC binding: the a2a-sdk's generated `A2AService`, served by `manage.py grpc_serve`.

The third door onto the same operations as JSON-RPC and HTTP+JSON (views.py): every RPC is
admitted by the same limits (apps.core.rate_limits: the caller's request rate, its open streams),
authenticated from the `authorization: Bearer` metadata (one fixed refusal for every bad
credential), negotiated from `a2a-version` (`negotiation_decide` writes the `negotiation.decided`
record, refusals included), then handed to operations.py. Errors are the ones views.py maps
(apps/a2a/errors.py): the gRPC status its row names, with `grpc-status-details-bin` holding a
`google.rpc.Status` whose details carry exactly one `google.rpc.ErrorInfo` (interop.md §A2A error
details), so an unknown and a foreign task answer the same bytes (interop.md §Isolation).

Database work: each RPC runs in its own `ThreadSensitiveContext` (apps.core.db_threads), so its
`sync_to_async` steps share one thread and one connection, given back when the RPC ends; nothing
holds a transaction across an await or a streamed message (STYLE.md habit 9).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeAlias

import grpc
from a2a.types import StreamResponse, a2a_pb2_grpc
from a2a.utils.errors import A2AError, InternalError
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import DataError
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2  # noqa: F401  (error_details_pb2: the details' types)

from apps.a2a import operations
from apps.a2a.errors import AuthenticationRequired, error_details, error_message, error_row, invalid_input
from apps.a2a.operations import Operation, StreamPlan
from apps.a2a.refusals import REFUSAL_ROWS, refusal_info
from apps.a2a.streams import task_responses
from apps.a2a.wire import request_check
from apps.core import metrics
from apps.core.api_errors import data_error_refusal
from apps.core.db_threads import release_db_connection
from apps.core.errors import ValidationFailed
from apps.core.fair_turns import turn_for
from apps.core.overload import is_overload
from apps.core.rate_limits import LimitSettings, StreamSlot, caller_key
from apps.core.request_limits import Refusal, overload_refusal, rate_refusal_async, refusal_pause, stream_slot_take
from apps.core.stream_lease import CredentialLapsed, items_while_allowed, stream_slot_held
from apps.tenants.stream_credential import credential_check

logger = logging.getLogger(__name__)

DETAILS_KEY = "grpc-status-details-bin"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


# ---------------------------------------------------------------------------------------------
# Errors: google.rpc.Status with one ErrorInfo (the gRPC column of apps/a2a/errors.py's rows)


class GrpcRefused(Exception):
    """An answer that is a gRPC status: its code, message and serialized google.rpc.Status."""

    def __init__(self, code: grpc.StatusCode, message: str, status: bytes) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _status_bytes(code: grpc.StatusCode, message: str, details: list[dict[str, Any]]) -> bytes:
    # Each detail's `@type` names its google.rpc message (error_details_pb2, imported for them).
    doc = {"code": code.value[0], "message": message, "details": details}
    status = json_format.ParseDict(doc, status_pb2.Status(), ignore_unknown_fields=True)
    return status.SerializeToString(deterministic=True)


def refused_for_error(error: A2AError) -> GrpcRefused:
    code = grpc.StatusCode[error_row(error).grpc_status]
    message = error_message(error)  # an identity refusal's own message (apps/a2a/errors.py)
    return GrpcRefused(code, message, _status_bytes(code, message, error_details(error)))


def refused_for_limit(refusal: Refusal) -> GrpcRefused:
    """A refusal before dispatch (rate, streams) or an overloaded host: refusals.py's gRPC column."""
    code = grpc.StatusCode[REFUSAL_ROWS[refusal.kind][2]]
    retry = {} if refusal.retry_after is None else {"retryAfterSeconds": str(refusal.retry_after)}
    return GrpcRefused(code, refusal.message, _status_bytes(code, refusal.message, [refusal_info(refusal, **retry)]))


def _refused_for(exc: BaseException) -> GrpcRefused:
    if isinstance(exc, GrpcRefused):
        return exc
    if isinstance(exc, A2AError):
        return refused_for_error(exc)
    if isinstance(exc, DataError):  # a value the database refused that the parse step missed
        return refused_for_error(invalid_input(data_error_refusal(exc)))
    if isinstance(exc, Exception) and is_overload(exc):
        return refused_for_limit(overload_refusal())
    logger.exception("a2a grpc: unhandled error", exc_info=exc)
    return refused_for_error(InternalError())


async def _abort(context: Context, refused: GrpcRefused) -> None:
    """Ends the RPC with the status (ServicerContext.abort raises)."""
    await context.abort(refused.code, refused.message, ((DETAILS_KEY, refused.status),))


# ---------------------------------------------------------------------------------------------
# Admit, authenticate, negotiate (operations.call_open, from metadata instead of headers)


def _metadata(context: Context, key: str) -> str | None:
    for item in context.invocation_metadata() or ():
        if item.key == key and isinstance(item.value, str):
            return item.value
    return None


async def _admitted(authorization: str | None, *, stream: bool) -> StreamSlot | None:
    """The request-limits middleware's checks for one RPC (the key's and its tenant's rate, then
    a stream's slot: key, tenant, host); the stream slot when one is held."""
    limits = LimitSettings.current()
    bucket = caller_key(authorization)
    if bucket is None:
        return None
    refusal = await rate_refusal_async(authorization, limits)
    if refusal is not None:
        await refusal_pause(refusal)
        raise refused_for_limit(refusal)
    if not stream:
        return None
    taken = await sync_to_async(stream_slot_take, thread_sensitive=False)(bucket, limits)
    if isinstance(taken, Refusal):
        raise refused_for_limit(taken)
    return taken


async def _run(operation: Operation, request: Any, context: Context) -> Any:
    """Authenticate and negotiate (a routed operation's `tenant` included: its agent's floor is part
    of the one decision), then the parse step the HTTP bindings run on their JSON: a request
    holding what no column or wire type can (a NUL, a messageId past 512, NaN in a Struct, an
    unknown enum value) is INVALID_ARGUMENT (wire.request_check). Then the operation."""
    requested = (_metadata(context, "a2a-version") or "").strip()
    call = await operations.call_open(
        authorization=_metadata(context, "authorization"),
        requested=requested or None,
        origin=_metadata(context, "origin"),
        a2a_tenant=request.tenant if operation.routed else None,
    )
    try:
        request_check(request)
    except ValidationFailed as exc:
        raise invalid_input(exc) from None
    return await operation.run(call, request)


def _observed(method: str, started: float, refused: GrpcRefused | None) -> None:
    """The RPC in `/metrics` (door `a2a-grpc`, operation the RPC's name): `ok`, or the refusal as
    `client_error` / `server_error` by its status. grpc_serve is its own process: with
    PROMETHEUS_MULTIPROC_DIR shared, the web process's `/metrics` includes it."""
    outcome = "ok" if refused is None else "server_error" if refused.code in _SERVER_FAULTS else "client_error"
    metrics.request_observed("a2a-grpc", method, outcome, started)


_SERVER_FAULTS = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS})


async def _unary(method: str, operation: Operation, request: Any, context: Context) -> Any:
    refused: GrpcRefused | None = None
    started = time.perf_counter()
    # Its log lines name the RPC and the ids it names, and its tenant once the key resolves.
    token = metrics.request_begun(operation=method, **operations.logged_ids(request))
    async with ThreadSensitiveContext():
        try:
            authorization = _metadata(context, "authorization")
            await _admitted(authorization, stream=False)
            async with turn_for(authorization, stream=False) as turn:  # its tenant's turn (apps.core.fair_turns)
                answer = await _run(operation, request, context)
                if turn is not None:
                    turn.answered = answer.ByteSize()
            _observed(method, started, None)
            return answer
        except Exception as exc:  # a client gone away (CancelledError) is not answered
            refused = _refused_for(exc)
        finally:
            await release_db_connection()
            metrics.reset_caller(token)
    assert refused is not None  # the try returned otherwise
    _observed(method, started, refused)
    await _abort(context, refused)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


async def _streamed(method: str, operation: Operation, request: Any, context: Context) -> AsyncIterator[StreamResponse]:
    """A server-streaming RPC from the same StreamPlan and log reader as the SSE bindings (its
    duration in `/metrics` is the stream's, to its end)."""
    refused: GrpcRefused | None = None
    started = time.perf_counter()
    authorization = _metadata(context, "authorization")
    async with ThreadSensitiveContext():
        try:
            slot = await _admitted(authorization, stream=True)
            # The slot goes back however the RPC ends, a cancellation included (apps.core.stream_lease).
            async with stream_slot_held(slot):
                plan = await _run(operation, request, context)
                await release_db_connection()  # nothing is held while the stream waits on the log
                if not isinstance(plan, StreamPlan):
                    raise InternalError()
                stream = task_responses(
                    run=plan.run, first=plan.first, position=plan.position,
                    end_when_interrupted=plan.end_when_interrupted,
                )  # fmt: skip
                # Authorized when it opened; ends UNAUTHENTICATED once the credential lapses.
                guarded = items_while_allowed(stream, credential_check(authorization, door="a2a"))
                async with contextlib.aclosing(guarded):
                    async for response in guarded:
                        yield response
        except CredentialLapsed:
            refused = refused_for_error(AuthenticationRequired())
        except Exception as exc:
            refused = _refused_for(exc)
        finally:
            await release_db_connection()
    _observed(method, started, refused)
    if refused is not None:
        await _abort(context, refused)


# ---------------------------------------------------------------------------------------------
# The service


def _rpc(name: str, operation: Operation) -> Callable[..., Any]:
    """The servicer method of one row of operations.OPERATIONS: admitted, authenticated and
    negotiated, parse-checked and run (`_run`), or ended with the mapped status."""
    if operation.streaming:

        async def streamed(self: Any, request: Any, context: Context) -> AsyncIterator[StreamResponse]:
            async for response in _streamed(name, operation, request, context):
                yield response

        return streamed

    async def unary(self: Any, request: Any, context: Context) -> Any:
        return await _unary(name, operation, request, context)

    return unary


class A2AGrpcService(a2a_pb2_grpc.A2AServiceServicer):
    """The a2a-sdk's generated service, every RPC one row of operations.OPERATIONS (`_rpc`)."""


for _name, _operation in operations.OPERATIONS.items():
    setattr(A2AGrpcService, _name, _rpc(_name, _operation))


def grpc_server_build(*, bind: str, port: int, tls: tuple[bytes, bytes] | None) -> tuple[grpc.aio.Server, int]:
    """An aio server with the A2A service on `bind:port` (TLS with (cert chain, key) when given);
    returns it with the bound port (0 picks a free one). The receive limit is the HTTP body limit."""
    from django.conf import settings

    limit = int(getattr(settings, "OPENWOP_MAX_BODY_BYTES", 0))
    options = [("grpc.max_receive_message_length", limit)] if limit > 0 else []
    server = grpc.aio.server(options=options)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(A2AGrpcService(), server)
    address = f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        credentials = grpc.ssl_server_credentials([(tls[1], tls[0])])
        bound = server.add_secure_port(address, credentials)
    return server, bound
