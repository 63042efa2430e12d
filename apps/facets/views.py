"""`GET /.well-known/openwop`: unauthenticated, strong ETag, If-None-Match -> 304."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from apps.core.discovery import discovery_bytes_and_etag


def _if_none_match_hits(header: str | None, etag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    # If-None-Match uses weak comparison (RFC 9110 §13.1.2): W/"x" matches "x".
    candidates = [c.strip().removeprefix("W/") for c in header.split(",")]
    return etag in candidates


@require_GET
def well_known_openwop(request: HttpRequest) -> HttpResponse:
    body, etag = discovery_bytes_and_etag()
    if _if_none_match_hits(request.headers.get("If-None-Match"), etag):
        response = HttpResponse(status=304)
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=60"
    return response
