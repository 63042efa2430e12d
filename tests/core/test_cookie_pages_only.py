"""Cookie-session middlewares run for browser pages only (apps/core/middleware.CookiePagesOnly).

Bearer-only paths (REST wire, vendor API, /a2a, /mcp) skip sessions, auth, messages and CSRF, so
they pay no thread round trips for them; admin and console pages keep every one of them.
"""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from django.utils.module_loading import import_string

COOKIE_MIDDLEWARES = [
    "apps.core.middleware.SessionMiddleware",
    "apps.core.middleware.AuthenticationMiddleware",
    "apps.core.middleware.MessageMiddleware",
    "apps.core.middleware.BearerApiCsrfMiddleware",
]
BEARER_PATHS = ["/a2a/jsonrpc", "/a2a/rest/tasks/x", "/mcp", "/runs/abc", "/host/openwop-host/api/whoami"]
BROWSER_PATHS = ["/console/", "/admin/", "/host/openwop-host/auditor/"]


def test_settings_use_the_wrapped_middlewares() -> None:
    for path in COOKIE_MIDDLEWARES:
        assert path in settings.MIDDLEWARE
    for plain in (
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ):
        assert plain not in settings.MIDDLEWARE


def _chain(path: str, *, is_async: bool) -> HttpRequest:
    """Run the four cookie middlewares in settings order around a view that returns the request."""
    seen: list[HttpRequest] = []
    if is_async:

        async def view(request: HttpRequest) -> HttpResponse:
            seen.append(request)
            return HttpResponse("ok")

        handler = view
    else:

        def sync_view(request: HttpRequest) -> HttpResponse:
            seen.append(request)
            return HttpResponse("ok")

        handler = sync_view  # type: ignore[assignment]
    ordered = [m for m in settings.MIDDLEWARE if m in COOKIE_MIDDLEWARES]
    for dotted in reversed(ordered):
        handler = import_string(dotted)(handler)
    request = RequestFactory().get(path)
    response = asyncio.run(handler(request)) if is_async else handler(request)  # type: ignore[arg-type]
    assert response.status_code == 200
    return seen[0]


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("path", BEARER_PATHS)
def test_bearer_paths_get_no_session_user_or_messages(path: str, is_async: bool) -> None:
    request = _chain(path, is_async=is_async)
    assert not hasattr(request, "session")
    assert not hasattr(request, "user")
    assert not hasattr(request, "_messages")


@pytest.mark.django_db
@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize("path", BROWSER_PATHS)
def test_browser_pages_keep_session_user_and_messages(path: str, is_async: bool) -> None:
    request = _chain(path, is_async=is_async)
    assert hasattr(request, "session")
    assert hasattr(request, "user")
    assert hasattr(request, "_messages")
