"""The doors served in-process from ASGI (apps/doors), beside Django's test client.

`door` drives `openwop_host.asgi.application` through httpx's ASGI transport on a loop of the
test's own, so a request takes the lean route exactly as it does under the server, against the
committed data of a `transactional_db` test; Django's test client takes the Django route through
the ORM. A test compares the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from apps.core.async_db import async_pool_close

T = TypeVar("T")


class Door:
    """Requests to the ASGI application on one private event loop (closed with its pool)."""

    def __init__(self) -> None:
        from openwop_host.asgi import application

        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1", timeout=30
        )

    def run(self, step: Callable[[], Awaitable[T]]) -> T:
        return self.loop.run_until_complete(step())

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.run(lambda: self.client.request(method, path, **kwargs))

    def close(self) -> None:
        async def shut() -> None:
            await self.client.aclose()
            await async_pool_close()

        self.run(shut)
        self.loop.close()


@pytest.fixture
def door(transactional_db) -> Iterator[Door]:  # type: ignore[no-untyped-def]
    served = Door()
    yield served
    served.close()
