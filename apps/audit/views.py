"""`GET /host/events` (streamHostEvents): the caller's own host events as Server-Sent Events."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET

from apps.audit.selectors import host_event_cursor_open
from apps.audit.streams import host_event_frames
from apps.core.sse import sse_response
from apps.core.stream_lease import while_allowed
from apps.tenants.selectors import subject_from_authorization
from apps.tenants.stream_credential import credential_check


@require_GET
async def host_events(request: HttpRequest) -> StreamingHttpResponse:
    # Errors raised here (401, 400, 409) happen before the stream starts, so the protocol
    # middleware renders them as the envelope.
    subject = await sync_to_async(subject_from_authorization)(request.headers.get("Authorization"), door="rest")
    # The cursor is fixed before the response starts: once a client has the headers, every event
    # appended afterwards reaches it.
    cursor = await sync_to_async(host_event_cursor_open)(
        subject=subject, last_event_id=request.headers.get("Last-Event-ID")
    )
    # Authorized once here; the credential is re-checked while the stream lasts (apps.core.stream_lease).
    allowed = credential_check(request.headers.get("Authorization"), door="rest")
    return sse_response(while_allowed(host_event_frames(cursor=cursor), allowed))
