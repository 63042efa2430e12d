"""The one copy of what a middleware needs to serve both sync and async stacks natively.

Django asks `sync_capable` / `async_capable` and hands over the next handler; a middleware that
follows the handler's mode never forces a thread hop (a sync-only middleware in an async stack
costs a `sync_to_async` round trip on every request, measured in bench/README.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]
SyncGetResponse = Callable[[HttpRequest], HttpResponseBase]
AsyncGetResponse = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


class HybridMiddleware:
    """Subclasses write `_scall` (sync stack) and `_acall` (async stack); `__call__` picks one."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        # The same next handler, typed for each stack (cast once here, not per request): `_scall`
        # calls `sync_next` (a response back), `_acall` awaits `async_next`.
        self.sync_next = cast(SyncGetResponse, get_response)
        self.async_next = cast(AsyncGetResponse, get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self._scall(request)

    def _scall(self, request: HttpRequest) -> HttpResponseBase:
        raise NotImplementedError

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        raise NotImplementedError
