"""`StaticFilesMiddleware`: WhiteNoise that stays on the event loop for every non-static request
(the sync-only original cost each request a hop into a thread and back) and still serves files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, RequestFactory, override_settings

from apps.core.middleware import StaticFilesMiddleware


def test_it_is_the_installed_static_files_middleware() -> None:
    assert "apps.core.middleware.StaticFilesMiddleware" in settings.MIDDLEWARE
    assert "whitenoise.middleware.WhiteNoiseMiddleware" not in settings.MIDDLEWARE


async def test_a_non_static_request_goes_on_down_the_async_stack_on_the_loop_thread() -> None:
    seen: list[threading.Thread] = []

    async def downstream(request: HttpRequest) -> HttpResponse:
        seen.append(threading.current_thread())
        return HttpResponse("from the view")

    middleware = StaticFilesMiddleware(downstream)
    loop_thread = threading.current_thread()
    response = await middleware(RequestFactory().get("/a2a/jsonrpc"))
    assert response.content == b"from the view"
    assert seen == [loop_thread]  # no thread hop on the way down


@pytest.mark.django_db
async def test_a_static_file_is_served_through_the_async_handler() -> None:
    expected = (Path(settings.BASE_DIR) / "static" / "console" / "console.css").read_bytes()
    response = await AsyncClient().get("/static/console/console.css")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)  # type: ignore[arg-type]
    assert body == expected
    assert response["Content-Type"].startswith("text/css")


async def test_production_lookup_serves_from_the_in_memory_table_without_calling_down() -> None:
    calls: list[str] = []

    async def downstream(request: HttpRequest) -> HttpResponse:
        calls.append(request.path)
        return HttpResponse("not static")

    with override_settings(WHITENOISE_AUTOREFRESH=False):  # as with DEBUG off
        middleware = StaticFilesMiddleware(downstream)
    assert not middleware.autorefresh
    response = await middleware(RequestFactory().get("/static/console/console.js"))
    assert response.status_code == 200 and calls == []
    assert (await middleware(RequestFactory().get("/static/no-such.js"))).content == b"not static"
    assert calls == ["/static/no-such.js"]
