"""Request limits enforced before any view runs: body size, JSON depth, per-key rate, streams.

One middleware for every door. It refuses a request before the view parses or dispatches it, so a
refused request changes nothing. Each door answers in its own wire: the REST wire and the vendor
API with the OpenWOP envelope (413 `payload_too_large`, 400 `validation_error`, 429 `rate_limited`
+ Retry-After); the A2A and MCP doors register a renderer for their URL prefix and answer with
their JSON-RPC / google.rpc.Status errors, never the envelope (interop.md §A2A error details).
Paths with no renderer (admin, console, static files, the public card) are not limited here;
Django's DATA_UPLOAD_MAX_MEMORY_SIZE still bounds their form bodies.

A stream (SSE on REST, A2A SendStreamingMessage / SubscribeToTask, host events) holds one of its
key's stream slots from before dispatch until the stream ends, so a refused stream never starts a
run. A request that turns out not to stream gives its slot back at once.

Tenant budgets (issue 49) sit beside the key's: its tenant's requests per window and open streams
over all of its keys (OPENWOP_TENANT_REQUESTS_PER_MINUTE, OPENWOP_TENANT_STREAMS, a TenantBudget row
overriding them) and this process's open streams (OPENWOP_MAX_STREAMS). The tenant comes from the
per-process bucket -> tenant table (apps.core.rate_limits `bucket_tenant`), never from a query, so
an over-budget request costs a counter and no authentication. Their refusals name the budget
(`Refusal.budget`) and are counted per tenant (`openwop_tenant_budget_refusals_total`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from apps.core import metrics
from apps.core.errors import OpenWopError, Overloaded, PayloadTooLarge, RateLimited, RequestTimeout, ValidationFailed
from apps.core.fair_turns import turn_for
from apps.core.hybrid_middleware import HybridMiddleware
from apps.core.json_limits import json_depth_exceeds, max_json_depth, request_json
from apps.core.overload import OVERLOAD_RETRY_AFTER_SECONDS, is_overload
from apps.core.protocol import wants_envelope
from apps.core.rate_limits import (
    BucketTenant,
    LimitSettings,
    SlotRefused,
    StreamSlot,
    bucket_tenant,
    caller_key,
    request_admit,
    request_admit_async,
    stream_slot_acquire,
    stream_slot_release,
    tenant_request_admit,
    tenant_request_admit_async,
)
from apps.core.responses import envelope_response
from apps.core.stream_lease import stream_slot_give_back, stream_slot_held

logger = logging.getLogger(__name__)

# A refused stream may retry once one of the key's streams has ended; this is a hint, not a promise.
STREAM_RETRY_AFTER_SECONDS = 5

_paused = 0  # rate refusals of this process waiting out their pause (one event loop per process)


def refusals_paused() -> int:
    return _paused


async def refusal_pause(refusal: Refusal) -> None:
    """Hold a rate refusal for OPENWOP_REFUSAL_PAUSE_SECONDS (at most its Retry-After) before it is
    answered: a closed-loop flood then costs the host one cheap refusal per connection per pause,
    not one per round trip (issue 49 item 3). A sleeping coroutine holds no thread, no database
    connection and no slot. At most OPENWOP_REFUSAL_PAUSE_MAX wait at once; past that (a flood on
    very many connections), refusals are answered at once, as before."""
    global _paused
    if refusal.kind != "rate_limited":
        return
    seconds = min(float(refusal.retry_after or 1), float(getattr(settings, "OPENWOP_REFUSAL_PAUSE_SECONDS", 0)))
    if seconds <= 0 or _paused >= int(getattr(settings, "OPENWOP_REFUSAL_PAUSE_MAX", 0)):
        return
    _paused += 1
    try:
        await asyncio.sleep(seconds)
    finally:
        _paused -= 1


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused, for a door's renderer. `kind` is one of payload_too_large,
    json_too_deep, rate_limited, streams_exhausted (before dispatch), overloaded (a view that
    could not get a database connection: `RequestLimitsMiddleware.process_exception`), or
    body_timeout (the body did not arrive in time: apps/core/read_deadline.py)."""

    kind: str
    message: str
    limit: int
    retry_after: int | None = None
    request_id: Any = None  # the JSON-RPC id when the body could be read safely, else None
    budget: str | None = None  # the tenant or host budget it hit (None: a limit of the key or request)

    def as_error(self) -> OpenWopError:
        """The host error for this refusal (the REST envelope; doors may map it further)."""
        details: dict[str, Any] = {"limit": self.limit}
        if self.budget is not None:
            details["budget"] = self.budget
        if self.kind == "payload_too_large":
            return PayloadTooLarge(self.message, details=details)
        if self.kind == "json_too_deep":
            return ValidationFailed(self.message, details={"maxDepth": self.limit})
        if self.kind == "overloaded":
            return Overloaded(self.message, retry_after=self.retry_after or OVERLOAD_RETRY_AFTER_SECONDS)
        if self.kind == "body_timeout":  # apps/core/read_deadline.py
            return RequestTimeout(self.message, details={"timeoutSeconds": self.limit})
        return RateLimited(self.message, retry_after=self.retry_after or 1, details=details)


def overload_refusal(request_id: Any = None) -> Refusal:
    return Refusal("overloaded", "The host is saturated; retry shortly.", 0, OVERLOAD_RETRY_AFTER_SECONDS, request_id)


Renderer = Callable[[HttpRequest, Refusal], HttpResponseBase]
_renderers: dict[str, Renderer] = {}


def register_refusal_renderer(prefix: str, renderer: Renderer) -> None:
    """A door's own rendering of a refusal for every path under `prefix` (called in AppConfig.ready)."""
    _renderers[prefix] = renderer


def _envelope_refusal(request: HttpRequest, refusal: Refusal) -> HttpResponseBase:
    return envelope_response(refusal.as_error())


def renderer_for(path: str) -> Renderer | None:
    for prefix in sorted(_renderers, key=len, reverse=True):
        if path.startswith(prefix):
            return _renderers[prefix]
    return _envelope_refusal if wants_envelope(path) else None


def max_body_bytes() -> int:
    return int(getattr(settings, "OPENWOP_MAX_BODY_BYTES", 0))


def body_refusal(request: HttpRequest) -> Refusal | None:
    """Size first (the Content-Length alone, before reading), then the body, then its nesting."""
    limit = max_body_bytes()
    too_large = Refusal("payload_too_large", f"The request body exceeds {limit} bytes.", limit)
    declared = (request.META.get("CONTENT_LENGTH") or "").strip()
    # ASCII digits only (str.isdigit also takes "²"), and no int() of thousands of digits.
    if limit > 0 and declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        return too_large
    try:
        body = request.body
    except RequestDataTooBig:
        return too_large
    if limit > 0 and len(body) > limit:  # a chunked body declares no length
        return too_large
    depth = max_json_depth()
    if body and json_depth_exceeds(body, depth):
        return Refusal("json_too_deep", f"JSON nesting deeper than {depth} levels.", depth)
    return None


def request_id_of(request: HttpRequest) -> Any:
    """The JSON-RPC id to echo, read only from a body that already passed the size and depth checks."""
    try:
        body = request_json(request)
    except (ValueError, UnicodeDecodeError, RequestDataTooBig):
        return None
    value = body.get("id") if isinstance(body, dict) else None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


_STREAM_PATHS = re.compile(r"^/(?:runs/.+/events|host/events|a2a/rest/.*(?:message:stream|:subscribe))$")
_JSONRPC_STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})


def is_stream_request(request: HttpRequest) -> bool:
    """Will this request open a stream if it succeeds? Decided before dispatch (module docstring)."""
    if _STREAM_PATHS.match(request.path):
        return True
    if re.match(r"^/a2a/jsonrpc/?$", request.path) and request.method == "POST":
        try:
            body = request_json(request)
        except (ValueError, UnicodeDecodeError):
            return False
        method = body.get("method") if isinstance(body, dict) else None
        return isinstance(method, str) and method in _JSONRPC_STREAM_METHODS
    return False


def _is_stream_response(response: HttpResponseBase) -> TypeGuard[StreamingHttpResponse]:
    return isinstance(response, StreamingHttpResponse) and response.get("Content-Type", "").startswith(
        "text/event-stream"
    )


async def stream_released_after(stream: AsyncIterator[bytes], slot: StreamSlot) -> AsyncIterator[bytes]:
    """The same bytes; the slot is renewed meanwhile and goes back however the stream ends."""
    async with stream_slot_held(slot):
        async for chunk in stream:
            yield chunk


def _released_after_sync(stream: Iterator[bytes], slot: StreamSlot) -> Iterator[bytes]:
    """The sync path (WSGI, Django's test client): nothing renews the lease, so a stream longer
    than OPENWOP_STREAM_SLOT_LEASE_SECONDS stops counting against the ceiling then."""
    try:
        yield from stream
    finally:
        stream_slot_release(slot)


@dataclass(frozen=True, slots=True)
class _Admission:
    """What the middleware decided before dispatch: a refusal, or the stream slot it holds."""

    refusal: Refusal | None
    held_slot: StreamSlot | None  # the stream slot this request holds, if any


def rate_refusal(authorization: str | None, limits: LimitSettings) -> Refusal | None:
    """The request-rate checks, from the Authorization header alone (no body, no query): the key's
    window, then its tenant's when this process knows the key's tenant (apps.core.rate_limits)."""
    bucket = caller_key(authorization)
    if bucket is None:
        return None
    refusal = _rate_refusal(limits, request_admit(bucket, limits))
    if refusal is None and (tenant := bucket_tenant(bucket)) is not None:
        refusal = _tenant_rate_refusal(tenant, limits, tenant_request_admit(tenant, limits))
    return refusal


async def rate_refusal_async(authorization: str | None, limits: LimitSettings) -> Refusal | None:
    """`rate_refusal` from the event loop (each window one round trip)."""
    bucket = caller_key(authorization)
    if bucket is None:
        return None
    refusal = _rate_refusal(limits, await request_admit_async(bucket, limits))
    if refusal is None and (tenant := bucket_tenant(bucket)) is not None:
        refusal = _tenant_rate_refusal(tenant, limits, await tenant_request_admit_async(tenant, limits))
    return refusal


def stream_slot_take(bucket: str, limits: LimitSettings) -> StreamSlot | Refusal | None:
    """A stream slot for the bucket's next stream (key, tenant, host ceilings), or the refusal of
    the first ceiling that is full; None when nothing is held (no ceiling, the cache down)."""
    tenant = bucket_tenant(bucket)
    taken = stream_slot_acquire(bucket, limits, tenant=tenant)
    if isinstance(taken, SlotRefused):
        return _stream_refusal(taken, tenant)
    return taken


def _admit(request: HttpRequest, *, rate_checked: bool = False) -> _Admission:
    """Every check before dispatch, in one synchronous step (the async path runs it in one thread
    hop; the sync path — Django's test client, WSGI — calls it directly and never nests loops).
    `rate_checked`: the rate was already counted (the doors do it before reading the body)."""
    limits = LimitSettings.current()
    authorization = request.headers.get("Authorization")
    bucket = caller_key(authorization)
    refusal = None if rate_checked else rate_refusal(authorization, limits)
    refusal = refusal or body_refusal(request)
    taken = None
    if refusal is None and bucket is not None and is_stream_request(request):
        taken = stream_slot_take(bucket, limits)
    return _admission(request, refusal, taken)


async def admit_async(request: HttpRequest, *, rate_checked: bool = False) -> _Admission:
    """`_admit` for the doors served from ASGI (apps/doors): the rate counters are async round
    trips on the loop; only a request that would open a stream takes a thread for its slot."""
    limits = LimitSettings.current()
    authorization = request.headers.get("Authorization")
    bucket = caller_key(authorization)
    refusal = None if rate_checked else await rate_refusal_async(authorization, limits)
    refusal = refusal or body_refusal(request)
    taken = None
    if refusal is None and bucket is not None and is_stream_request(request):
        taken = await sync_to_async(stream_slot_take, thread_sensitive=False)(bucket, limits)
    return _admission(request, refusal, taken)


def _rate_refusal(limits: LimitSettings, retry_after: int | None) -> Refusal | None:
    if retry_after is None:
        return None
    return Refusal(
        "rate_limited",
        f"More than {limits.requests} requests in {limits.window_seconds} s for this credential.",
        limits.requests,
        retry_after,
    )


def _tenant_rate_refusal(tenant: BucketTenant, limits: LimitSettings, retry_after: int | None) -> Refusal | None:
    if retry_after is None:
        return None
    budget = "tenant_requests_per_minute"
    metrics.tenant_budget_refused(tenant.slug, budget)
    requests = tenant.requests(limits)
    message = f"More than {requests} requests in {limits.window_seconds} s for this tenant (its budget {budget})."
    return Refusal("rate_limited", message, requests, retry_after, budget=budget)


def _stream_refusal(refused: SlotRefused, tenant: BucketTenant | None) -> Refusal:
    """A stream over a ceiling: the key's (as before budgets existed), its tenant's or the host's."""
    budget: str | None = refused.budget
    if refused.budget == "key_streams":
        message, budget = f"This credential already holds {refused.limit} open streams.", None
    elif refused.budget == "tenant_streams":
        message = f"This tenant already holds {refused.limit} open streams (its budget tenant_streams)."
    else:
        message = f"The host already serves {refused.limit} streams (its budget host_streams)."
    if budget is not None:
        metrics.tenant_budget_refused(tenant.slug if tenant is not None else "", budget)
    return Refusal("streams_exhausted", message, refused.limit, STREAM_RETRY_AFTER_SECONDS, budget=budget)


def _admission(request: HttpRequest, refusal: Refusal | None, taken: StreamSlot | Refusal | None) -> _Admission:
    """The decision once the counters answered: a stream over a ceiling is refused, and a rate or
    stream refusal echoes the JSON-RPC id."""
    if isinstance(taken, Refusal):
        refusal = taken
    if refusal is not None and refusal.kind in ("rate_limited", "streams_exhausted"):
        refusal = dataclasses.replace(refusal, request_id=request_id_of(request))
    return _Admission(refusal, taken if isinstance(taken, StreamSlot) else None)


class RequestLimitsMiddleware(HybridMiddleware):
    """Placed right inside ProtocolEnvelopeMiddleware, so a REST refusal is stamped like any answer."""

    def _scall(self, request: HttpRequest) -> Any:
        render = renderer_for(request.path)
        if render is None:
            return self.sync_next(request)
        admission = _admit(request)
        if admission.refusal is not None:
            return render(request, admission.refusal)
        try:
            response = self.sync_next(request)
        except BaseException:
            if admission.held_slot is not None:
                stream_slot_release(admission.held_slot)
            raise
        return self._hand_back(response, admission)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        render = renderer_for(request.path)
        if render is None:
            return await self.async_next(request)
        admission = await sync_to_async(_admit, thread_sensitive=False)(request)
        if admission.refusal is not None:
            await refusal_pause(admission.refusal)
            return render(request, admission.refusal)
        # A stream's slot is its budget; every other answer waits for its tenant's turn in this
        # process (apps.core.fair_turns), as on the doors served from ASGI.
        streams = admission.held_slot is not None or is_stream_request(request)
        try:
            async with turn_for(request.headers.get("Authorization"), stream=streams) as turn:
                response = await self.async_next(request)
                if turn is not None and not response.streaming:
                    turn.answered = len(response.content)  # type: ignore[attr-defined]
        except BaseException:
            if admission.held_slot is not None:
                await stream_slot_give_back(admission.held_slot)
            raise
        if admission.held_slot is not None and not (_is_stream_response(response) and response.is_async):
            await stream_slot_give_back(admission.held_slot)
            return response
        return self._hand_back(response, admission)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        """A view that failed because the host is saturated answers 503 + Retry-After in its door's
        wire (apps/core/overload.py); anything else goes on to the other handlers."""
        render = renderer_for(request.path)
        if render is None or not is_overload(exception):
            return None
        logger.warning("overloaded: %s %s answered 503 (%s)", request.method, request.path, type(exception).__name__)
        return render(request, overload_refusal(request_id_of(request)))

    @staticmethod
    def _hand_back(response: HttpResponseBase, admission: _Admission) -> HttpResponseBase:
        """A held slot rides along with a stream until it ends, and is given back at once otherwise."""
        slot = admission.held_slot
        if slot is None:
            return response
        if _is_stream_response(response):
            # `is_async` says which of the two iterator kinds `streaming_content` is; the stubs can't.
            if response.is_async:
                content = cast(AsyncIterator[bytes], response.streaming_content)
                response.streaming_content = stream_released_after(content, slot)
            else:
                sync_content = cast(Iterator[bytes], response.streaming_content)
                response.streaming_content = _released_after_sync(iter(sync_content), slot)
        else:
            stream_slot_release(slot)
        return response


def limits_advertised() -> dict[str, Any]:
    """Discovery `extensions."openwop-host.limits"`: the spec's `limits` family has no field for a
    body size, a nesting depth or a request rate, so a client learns them here (0 = no limit)."""
    limits = LimitSettings.current()
    return {
        "maxBodyBytes": max_body_bytes(),
        "maxJsonDepth": max_json_depth(),
        "rateLimit": {"requests": limits.requests, "windowSeconds": limits.window_seconds},
        "maxConcurrentStreamsPerKey": limits.streams,
        "maxPushConfigsPerTask": int(getattr(settings, "OPENWOP_MAX_PUSH_CONFIGS_PER_TASK", 0)),
        "maxPendingDeliveriesPerTenant": int(getattr(settings, "OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT", 0)),
    }
