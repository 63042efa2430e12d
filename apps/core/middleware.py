"""One middleware for the REST wire's response rules (versioning.md §1.4, errors.md).

On protocol paths it selects the contract from `OpenWOP-Version` (406 for an unlisted major) and
stamps `OpenWOP-Version` on every response (304s and errors too). On protocol and vendor API
paths it turns Django's own 404, 405 and 500 pages into the envelope, so no HTML or stack trace
ever reaches a client of the wire.

`StaticFilesMiddleware` is WhiteNoise made async-capable: WhiteNoise's own middleware is sync-only,
which under ASGI costs every request (not only static ones) a hop into a thread and back out.
"""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware

from apps.core.challenges import challenge_401
from apps.core.errors import (
    Forbidden,
    InternalError,
    NotFound,
    OpenWopError,
    PayloadTooLarge,
    ValidationFailed,
)
from apps.core.hybrid_middleware import GetResponse, HybridMiddleware
from apps.core.protocol import PREFERRED_VERSION, is_protocol_path, select_contract, wants_envelope
from apps.core.responses import envelope_response

logger = logging.getLogger(__name__)


_STATUS_ERRORS: dict[int, type[OpenWopError]] = {400: ValidationFailed, 403: Forbidden, 413: PayloadTooLarge}


def _django_page_to_envelope(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """Replace any non-JSON error page produced by Django itself (404, 405, 400, 500...) with the envelope."""
    content_type = response.get("Content-Type", "")
    if response.status_code < 400 or content_type.startswith("application/json"):
        return response
    status = response.status_code
    if status == 405:
        allowed = response.get("Allow", "")
        enveloped = envelope_response(
            ValidationFailed(
                f"Method {request.method} is not allowed here.",
                details={"allowed": [m.strip() for m in allowed.split(",") if m.strip()]},
                status=405,
            )
        )
        if allowed:
            enveloped["Allow"] = allowed
        return enveloped
    if status == 404:
        return envelope_response(NotFound(f"No resource at {request.path}."))
    return envelope_response(_STATUS_ERRORS.get(status, InternalError)())


def envelope_contract_open(request: HttpRequest) -> tuple[HttpResponseBase | None, str | None]:
    """Before a REST-wire view: (the refusal of an unsupported OpenWOP-Version, else None; the
    contract the answer is stamped with). Django's middleware and the door (apps/doors) both call it."""
    if not is_protocol_path(request.path):
        return None, None
    try:
        return None, select_contract(request.headers.get("OpenWOP-Version"))
    except OpenWopError as exc:
        response = envelope_response(exc)
        response["OpenWOP-Version"] = PREFERRED_VERSION
        return response, None


def envelope_contract_close(request: HttpRequest, response: HttpResponseBase, contract: str | None) -> HttpResponseBase:
    """After the view: Django's own error pages in the envelope, and the contract's header."""
    if wants_envelope(request.path):
        response = _django_page_to_envelope(request, response)
    if contract is not None:
        response["OpenWOP-Version"] = contract
    return response


class ProtocolEnvelopeMiddleware(HybridMiddleware):
    def _scall(self, request: HttpRequest) -> HttpResponseBase:
        early, contract = envelope_contract_open(request)
        if early is not None:
            return early
        return envelope_contract_close(request, self.sync_next(request), contract)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        early, contract = envelope_contract_open(request)
        if early is not None:
            return early
        return envelope_contract_close(request, await self.async_next(request), contract)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if not wants_envelope(request.path):
            return None
        if isinstance(exception, OpenWopError):
            response = envelope_response(exception)
            if exception.status == 401:  # identity.md §2.5: the OAuth challenge, when the host has a lane
                challenge_401(response, presented="HTTP_AUTHORIZATION" in request.META)
            return response
        logger.exception("Unhandled error on %s %s", request.method, request.path)
        return envelope_response(InternalError())


def is_bearer_only_path(path: str) -> bool:
    """The REST wire, the vendor API and the A2A/MCP interfaces: bearer keys only, no cookies."""
    return wants_envelope(path) or path.startswith(("/a2a", "/mcp"))


class CookiePagesOnly:
    """Mixin for a cookie-session middleware (Django's `MiddlewareMixin` kind): bearer-only paths
    skip it and go straight to the next handler.

    Under ASGI such a middleware runs each of its hooks in a thread (`sync_to_async`): thread
    round trips for a session, a user, messages and a CSRF cookie a bearer request never reads.
    Admin, console and auditor pages keep all of it."""

    get_response: GetResponse

    def __call__(self, request: HttpRequest):
        if not getattr(self, "async_mode", False) and is_bearer_only_path(request.path):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if is_bearer_only_path(request.path):
            return await self.get_response(request)  # type: ignore[misc]
        return await super().__acall__(request)  # type: ignore[misc]


class SessionMiddleware(CookiePagesOnly, DjangoSessionMiddleware):
    pass


class AuthenticationMiddleware(CookiePagesOnly, DjangoAuthenticationMiddleware):
    pass


class MessageMiddleware(CookiePagesOnly, DjangoMessageMiddleware):
    pass


class BearerApiCsrfMiddleware(CookiePagesOnly, CsrfViewMiddleware):
    """CSRF protects cookie sessions (admin, console). The REST wire, the vendor API and the A2A/MCP
    interfaces authenticate with bearer keys only, so a forged cross-site request carries no
    credential there; CSRF's HTML refusal must not reach those clients."""

    def process_view(self, request, callback, callback_args, callback_kwargs):
        if is_bearer_only_path(request.path):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class StaticFilesMiddleware(HybridMiddleware, WhiteNoiseMiddleware):
    """WhiteNoise with an async path: a request for no static file goes straight on down the async
    stack; a static file is served as WhiteNoise serves it, its file work in a thread."""

    def __init__(self, get_response: GetResponse) -> None:
        WhiteNoiseMiddleware.__init__(self, get_response)
        HybridMiddleware.__init__(self, get_response)

    def _scall(self, request: HttpRequest) -> HttpResponseBase:
        return WhiteNoiseMiddleware.__call__(self, request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:  # development: looks on disk
            static_file = await sync_to_async(self.find_file)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            return await self.async_next(request)
        return await sync_to_async(self.serve)(static_file, request)
