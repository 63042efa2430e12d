"""Django's pages without a door renderer of their own (the console, the admin) when the database
is out of reach (apps/core/overload.py): 503 with Retry-After and a short page, not the 500 page (or,
under DEBUG, the traceback page)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseBase

from apps.core.hybrid_middleware import HybridMiddleware
from apps.core.overload import OVERLOAD_RETRY_AFTER_SECONDS, is_overload
from apps.core.request_limits import renderer_for

logger = logging.getLogger(__name__)

UNAVAILABLE_PAGE = (
    "<!doctype html><title>Unavailable</title><h1>Unavailable</h1>"
    "<p>The host cannot reach its database right now. Retry in a moment.</p>"
)


class DatabaseUnavailableMiddleware(HybridMiddleware):
    """Django's pages without a door renderer of their own (the console, the admin): a view that
    could not reach the database answers 503 with Retry-After, not the 500 page (or, under DEBUG,
    the traceback page). Paths that have a renderer are RequestLimitsMiddleware's to answer."""

    def _scall(self, request: HttpRequest) -> HttpResponseBase:
        return self.sync_next(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        return await self.async_next(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if renderer_for(request.path) is not None or not is_overload(exception):
            return None
        logger.warning("database unreachable: %s %s answered 503 (%s)", request.method, request.path,
                       type(exception).__name__)  # fmt: skip
        response = HttpResponse(UNAVAILABLE_PAGE, status=503, content_type="text/html; charset=utf-8")
        response["Retry-After"] = str(OVERLOAD_RETRY_AFTER_SECONDS)
        response["Cache-Control"] = "no-store"
        return response
