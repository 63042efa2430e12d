"""The run event log over HTTP, as async views: the SSE channel and the long poll (events.md).

Both authenticate, authorize and resolve the run before the first byte, then read the log in
short `sync_to_async` reads: no transaction or connection is held while waiting or streaming.
They wait on the run's wake-up group (a hint published after each commit) and re-read the
database every half second anyway, so a wake-up lost between processes only costs latency. The
SSE streams of one run in this process share those reads (apps/core/fanout.py): one read per
wake-up for all of them, not one per stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.http import require_GET

from apps.core.db_threads import db_connection_release
from apps.core.errors import OpenWopError, ValidationFailed
from apps.core.fanout import FanOut, Frame
from apps.core.responses import envelope_response
from apps.core.sse import SseEvent, format_event, last_event_id, position_parse, sse_response, wake_waiter
from apps.core.stream_lease import while_allowed
from apps.oauth.challenge import envelope_challenged
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES, RunEvent
from apps.runs.paths import run_id_from_path
from apps.runs.reads import RunRow, events_after, events_after_sync, snapshot_read, snapshot_read_sync
from apps.runs.wire import run_event_doc
from apps.tenants.selectors import subject_from_authorization, subject_tenant_pk
from apps.tenants.stream_credential import credential_check

# events.md §The events channel: every event we emit is an `updates`-tier event, so `updates`
# and `debug` are the same stream here; `values` and `messages` are not implemented.
STREAM_MODES_SERVED = ("updates", "debug")
# Without a shared channel layer (the zero-setup default) a worker's wake-up never reaches this
# process: re-reading the log this often bounds the latency; a read is one indexed query.
DB_RECHECK_SECONDS = 0.5
POLL_TIMEOUT_DEFAULT = 30
POLL_TIMEOUT_MAX = 60


logger = logging.getLogger(__name__)


class UnsupportedStreamMode(OpenWopError):
    code = "unsupported_stream_mode"
    default_message = "This stream mode is not served."

    def __init__(self) -> None:
        super().__init__(details={"supported": list(STREAM_MODES_SERVED)}, status=400)


def _run_readable(authorization: str | None, segment: str) -> RunRow:
    subject = subject_from_authorization(authorization, door="rest")
    run_id = run_id_from_path(subject=subject, segment=segment)
    return snapshot_read_sync(tenant_pk=subject_tenant_pk(subject), run_id=run_id, artifacts=False).run


def _stream_mode_check(value: str | None) -> None:
    if value is None:
        return
    modes = value.split(",")
    if not modes or any(mode not in STREAM_MODES_SERVED for mode in modes):
        raise UnsupportedStreamMode()


def _stream_open(authorization: str | None, segment: str, stream_mode: str | None, request: HttpRequest) -> _Opened:
    """Everything before the first byte, in one thread hop: authorize and resolve the run, check
    the parameters (in that order: nothing about the run is said before authorization), and read
    the replay. The request's connection is given back before streaming starts."""
    try:
        run = _run_readable(authorization, segment)
        _stream_mode_check(stream_mode)
        after = last_event_id(request)
        if run.is_terminal and after >= run.last_sequence:
            return _Opened(run=run, after=after, replay=None)
        return _Opened(run=run, after=after, replay=_stream_read(run, after))
    finally:
        db_connection_release()


@dataclass(frozen=True, slots=True)
class _Opened:
    run: RunRow
    after: int
    replay: list[Frame] | None  # None: the caller already holds the terminal event


def _stream_read(run: RunRow, after: int) -> list[Frame]:
    """The run's events after `after` as SSE frames, on Django's connection (the stream's replay,
    read with its authorization in one thread hop)."""
    return _frames(run, after, events_after_sync(tenant_pk=run.tenant_id, run_pk=run.pk, after=after))


async def _stream_read_on_loop(run: RunRow, after: int) -> list[Frame]:
    """`_stream_read` on the event loop: every later read of the run's streams, shared by all of
    them (apps/core/fanout.py), which then pushes what it read with no thread hop in between. Its
    debug line is what tests/runs/test_sse_fanout.py counts."""
    return _frames(run, after, await events_after(tenant_pk=run.tenant_id, run_pk=run.pk, after=after))


def _frames(run: RunRow, after: int, events: list[RunEvent]) -> list[Frame]:
    frames = []
    for event in events:
        doc = run_event_doc(event, run_id=run.run_id)
        sse = SseEvent(id=doc["sequence"], data=doc, event=doc["type"], terminal=doc["type"] in TERMINAL_EVENT_TYPES)
        frames.append(Frame(id=sse.id, data=format_event(sse), terminal=sse.terminal))
    logger.debug("run log read run=%s after=%d rows=%d", run.run_id, after, len(frames))
    return frames


@require_GET
async def run_events_stream(request: HttpRequest, run_ref: str) -> HttpResponseBase:
    """`GET /runs/{runId}/events`: `id:` is the sequence, `event:` the type, `data:` the RunEventDoc;
    resumes after `Last-Event-ID` (read only after authorization) and ends after the terminal event.
    Every stream of a run in this process shares one read per wake-up (apps.core.fanout)."""
    try:
        opened = await sync_to_async(_stream_open)(
            request.headers.get("Authorization"), run_ref, request.GET.get("streamMode"), request
        )
    except OpenWopError as exc:
        return await _refused(request, exc)
    # No database connection to open the stream with propagates: every door answers that one way
    # (503 + Retry-After, RequestLimitsMiddleware.process_exception with apps/core/overload.py).
    if opened.replay is None:
        # The caller already holds the terminal event: close at once, sending nothing (events.md).
        return sse_response(_nothing())
    run = opened.run
    fan_out = FanOut(
        key=("runs.events", run.tenant_id, run.pk),
        group=run_wake_group(run.run_id),
        after=opened.after,
        read=functools.partial(_stream_read, run),
        first=opened.replay,
        head=run.last_sequence,
        poll_seconds=DB_RECHECK_SECONDS,
        shared_read=functools.partial(_stream_read_on_loop, run),
    )
    # Served by Django (the door writes `fan_out` itself, and re-checks the credential there too):
    # authorized once at open, re-checked while it lasts (apps.core.stream_lease).
    allowed = credential_check(request.headers.get("Authorization"), door="rest")
    response = sse_response(while_allowed(fan_out.stream(), allowed))
    response.fan_out = fan_out  # type: ignore[attr-defined]  # the door writes it directly (apps/doors/asgi.py)
    return response


async def _refused(request: HttpRequest, error: OpenWopError) -> HttpResponseBase:
    """The envelope; a 401 with the OAuth challenge when the host has a lane (read off the loop)."""
    if error.status != 401:
        return envelope_response(error)
    presented = "Authorization" in request.headers
    return await sync_to_async(envelope_challenged)(error, presented=presented)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


@require_GET
async def run_events_poll(request: HttpRequest, run_ref: str) -> HttpResponseBase:
    """`GET /runs/{runId}/events/poll?afterSequence=&timeout=`: events after the cursor, waiting up
    to `timeout` seconds (default 30) for the first one unless the run has ended."""
    try:
        run = await sync_to_async(_run_readable)(request.headers.get("Authorization"), run_ref)
        after = _int_param(request, "afterSequence", default=0, low=0, high=None)
        timeout = _int_param(request, "timeout", default=POLL_TIMEOUT_DEFAULT, low=1, high=POLL_TIMEOUT_MAX)
    except OpenWopError as exc:
        return await _refused(request, exc)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with wake_waiter(run_wake_group(run.run_id)) as wait:
        while True:
            docs, status, last_sequence = await _log_after(run, after)
            terminal = status in TERMINAL_STATUSES
            remaining = deadline - loop.time()
            if docs or terminal or remaining <= 0:
                break
            await wait(min(DB_RECHECK_SECONDS, remaining))
    return JsonResponse(
        {
            "runId": run.run_id,
            "events": docs,
            "lastSequence": last_sequence if last_sequence > 0 else -1,
            "status": status,
            "isTerminal": terminal,
        }
    )


async def _log_after(run: RunRow, after: int) -> tuple[list[dict[str, Any]], str, int]:
    """Events after `after`, with the status and newest sequence read just before them (a run
    seen terminal has every event it will ever have by then)."""
    fresh = (await snapshot_read(tenant_pk=run.tenant_id, run_id=run.run_id, artifacts=False)).run
    events = await events_after(tenant_pk=run.tenant_id, run_pk=run.pk, after=after)
    return [run_event_doc(e, run_id=run.run_id) for e in events], fresh.status, fresh.last_sequence


def _int_param(request: HttpRequest, name: str, *, default: int, low: int, high: int | None) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    value = position_parse(raw)
    if value is None or value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValidationFailed(f"{name} must be an integer {bounds}.", details={"field": name})
    return value
