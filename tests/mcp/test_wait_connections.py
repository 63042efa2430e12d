"""A tools/call waiting for its run holds no database connection (apps/core/db_threads.py).

Found by the bench (MCP tools/call at c = 16: half the calls answered 500 after 10 s, the rest
waited for them): the waiting step ran in a fresh context, so its reads queued on one thread shared
by every request of the process, and the request's own thread kept the connection it had used to
authenticate and start the run for the whole wait. With a pool of 8 the 9th concurrent call waited
for a connection until the pool gave up. Here a uvicorn with a pool of 2 (and a short pool timeout)
answers six concurrent calls whose runs each take a second and a half, through the SDK client, in
a second tenant as well, and none of them meets a pool timeout.
"""

from __future__ import annotations

import asyncio

from tests.live import pooled_env, start_celery_worker, start_web
from tests.mcp.sdk_client import mcp_client

CALLS = 6
POOL = 2
DELAY_MS = 1500


def test_more_waiting_calls_than_pooled_connections_all_answer(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    own_env = pooled_env(env, size=POOL, timeout=3, queue_suffix="mcppool")
    daphne, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="mcppool")
    try:
        keys = [make_key("acme"), make_key("globex")]

        async def call(key: str) -> tuple[bool | None, object]:
            async with mcp_client(base_url, key) as client:
                result = await client.call_tool("conformance-delay", {"delayMs": DELAY_MS})
            return result.is_error, result.structured_content

        async def everyone() -> list[tuple[bool | None, object]]:
            return await asyncio.gather(*(call(keys[i % 2]) for i in range(CALLS)))

        results = asyncio.run(everyone())
        assert len(results) == CALLS
        for is_error, structured in results:
            assert is_error is False, daphne.log()[-3000:]
            assert isinstance(structured, dict) and structured["delayedMs"] >= DELAY_MS
        assert "PoolTimeout" not in daphne.log()
    finally:
        worker.stop()
        daphne.stop()
