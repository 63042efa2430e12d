"""The run event log over HTTP, as async views: the SSE channel and the long poll (events.md).

Both authenticate, authorize and resolve the run before the first byte, then read the log in
short `sync_to_async` reads: no transaction or connection is held while waiting or streaming.
They wait on the run's wake-up group (a hint published after each commit) and re-read the
database every half second anyway, so a wake-up lost between processes only costs latency.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from apps.core.errors import OpenWopError, ValidationFailed
from apps.core.responses import envelope_response
from apps.core.sse import SseEvent, last_event_id, sse_response, stream_log, wake_waiter
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_EVENT_TYPES, Run
from apps.runs.paths import run_id_from_path
from apps.runs.selectors import run_events_after, run_get_readable
from apps.runs.wire import run_event_doc
from apps.tenants.selectors import subject_from_authorization

# events.md §The events channel: every event we emit is an `updates`-tier event, so `updates`
# and `debug` are the same stream here; `values` and `messages` are not implemented.
STREAM_MODES_SERVED = ("updates", "debug")
# Without a shared channel layer (the zero-setup default) a worker's wake-up never reaches this
# process: re-reading the log this often bounds the latency; a read is one indexed query.
DB_RECHECK_SECONDS = 0.5
POLL_TIMEOUT_DEFAULT = 30
POLL_TIMEOUT_MAX = 60


class UnsupportedStreamMode(OpenWopError):
    code = "unsupported_stream_mode"
    default_message = "This stream mode is not served."

    def __init__(self) -> None:
        super().__init__(details={"supported": list(STREAM_MODES_SERVED)}, status=400)


def _run_readable(authorization: str | None, segment: str) -> Run:
    subject = subject_from_authorization(authorization)
    return run_get_readable(subject=subject, run_id=run_id_from_path(subject=subject, segment=segment))


def _stream_mode_check(value: str | None) -> None:
    if value is None:
        return
    modes = value.split(",")
    if not modes or any(mode not in STREAM_MODES_SERVED for mode in modes):
        raise UnsupportedStreamMode()


def _log_after(run: Run, after: int) -> tuple[list[dict[str, Any]], str, int]:
    """Events after `after` with the status and newest sequence read alongside them."""
    fresh = Run.objects.for_tenant(run.tenant_id).only("status", "last_sequence").get(pk=run.pk)
    events = run_events_after(run=run, after=after)
    return [run_event_doc(e, run_id=run.run_id) for e in events], fresh.status, fresh.last_sequence


@require_GET
async def run_events_stream(request: HttpRequest, run_ref: str) -> HttpResponse:
    """`GET /runs/{runId}/events`: `id:` is the sequence, `event:` the type, `data:` the RunEventDoc;
    resumes after `Last-Event-ID` (read only after authorization) and ends after the terminal event."""
    try:
        run = await sync_to_async(_run_readable)(request.headers.get("Authorization"), run_ref)
        _stream_mode_check(request.GET.get("streamMode"))
        after = last_event_id(request)
    except OpenWopError as exc:
        return envelope_response(exc)

    async def fetch(position: int) -> list[SseEvent]:
        docs, _, _ = await sync_to_async(_log_after)(run, position)
        return [
            SseEvent(id=doc["sequence"], data=doc, event=doc["type"], terminal=doc["type"] in TERMINAL_EVENT_TYPES)
            for doc in docs
        ]

    if run.is_terminal and after >= run.last_sequence:
        # The caller already holds the terminal event: close at once, sending nothing (events.md).
        return sse_response(_nothing())
    return sse_response(
        stream_log(group=run_wake_group(run.run_id), after=after, fetch=fetch, poll_seconds=DB_RECHECK_SECONDS)
    )


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


@require_GET
async def run_events_poll(request: HttpRequest, run_ref: str) -> HttpResponse:
    """`GET /runs/{runId}/events/poll?afterSequence=&timeout=`: events after the cursor, waiting up
    to `timeout` seconds (default 30) for the first one unless the run has ended."""
    try:
        run = await sync_to_async(_run_readable)(request.headers.get("Authorization"), run_ref)
        after = _int_param(request, "afterSequence", default=0, low=0, high=None)
        timeout = _int_param(request, "timeout", default=POLL_TIMEOUT_DEFAULT, low=1, high=POLL_TIMEOUT_MAX)
    except OpenWopError as exc:
        return envelope_response(exc)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with wake_waiter(run_wake_group(run.run_id)) as wait:
        while True:
            docs, status, last_sequence = await sync_to_async(_log_after)(run, after)
            terminal = status in {"completed", "failed", "cancelled"}
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


def _int_param(request: HttpRequest, name: str, *, default: int, low: int, high: int | None) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValidationFailed(f"{name} must be an integer {bounds}.", details={"field": name})
    return int(raw)
