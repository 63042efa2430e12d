"""A wake-up cleanup that dies with Redis logs one warning, not a traceback (apps/core/sse.py).

Found by tests/hardening/test_fault_redis.py: killing Redis right after a wake-up was received left
channels_redis's backup-cleanup task failing with nobody awaiting it, and asyncio logged it as
"Task exception was never retrieved" with a full traceback in the server's log. Here the same kind
of task fails on a loop with the handler installed, and an unrelated failing task still reaches the
previous handler unchanged.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from apps.core.sse import quiet_lost_wakeup_cleanups


class FakeLayer:
    """Stands in for channels_redis's RedisChannelLayer: only the method's name matters."""

    async def _clean_receive_backup(self, index: int, channel: str) -> None:
        raise RedisConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')")


async def _unrelated_failure() -> None:
    raise ValueError("a bug somewhere else")


def _run_and_drop(coro_factory: Any) -> list[dict[str, Any]]:
    """Run a task to its failure on a fresh loop, never retrieve its exception, and return what the
    loop's previous handler (the one before ours) received."""
    seen: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        quiet_lost_wakeup_cleanups(loop)
        quiet_lost_wakeup_cleanups(loop)  # idempotent: installed once per loop
        task = loop.create_task(coro_factory())
        loop.run_until_complete(asyncio.wait([task]))
        del task
        gc.collect()  # the never-retrieved exception is reported when the task is collected
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    return seen


def test_a_lost_cleanup_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="apps.core.sse"):
        seen = _run_and_drop(lambda: FakeLayer()._clean_receive_backup(0, "ow.run.x"))
    assert seen == []  # never reached asyncio's traceback-printing handler
    assert [r.getMessage() for r in caplog.records if r.name == "apps.core.sse"] == [
        "a wake-up's cleanup was lost: ConnectionError"
    ]


def test_any_other_unretrieved_failure_still_reaches_the_previous_handler() -> None:
    seen = _run_and_drop(_unrelated_failure)
    assert len(seen) == 1
    assert isinstance(seen[0]["exception"], ValueError)
