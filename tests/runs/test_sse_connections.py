"""Open SSE streams do not hold database connections while they wait (apps/core/sse.stream_log).

Found by the SSE fan-out bench: every open `GET /runs/{id}/events` kept its request thread's
PostgreSQL connection for the stream's whole life, so a pool of 8 served 8 subscribers and the 9th
waited for a connection and failed with a 500. Here a uvicorn with a pool of 2 (and a short pool
timeout) serves six subscribers of one run, and each one gets every event through `run.completed`.
"""

from __future__ import annotations

import asyncio
import json

import httpx
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from tests.live import pooled_env, start_celery_worker, start_web

SUBSCRIBERS = 6
POOL = 2


async def _subscribe(base_url: str, key: str, run_id: str) -> list[str]:
    types: list[str] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        async with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    types.append(json.loads(line[5:])["type"])
                    if types[-1] == "run.completed":
                        break
    return types


def test_more_subscribers_than_pooled_connections_all_get_every_event(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    own_env = pooled_env(env, size=POOL, timeout=3, queue_suffix="ssepool")
    daphne, base_url = start_web(own_env, var_dir)
    worker = None
    try:
        key = make_key("acme")
        client = OpenwopClient(base_url=base_url, api_key=key, timeout=30)
        run_id = client.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 6000})).runId

        async def everyone() -> list[list[str]]:
            subscribers = [asyncio.create_task(_subscribe(base_url, key, run_id)) for _ in range(SUBSCRIBERS)]
            await asyncio.sleep(1.0)  # all streams open and waiting before the worker starts the run
            return await asyncio.gather(*subscribers)

        loop = asyncio.new_event_loop()
        try:
            pending = loop.create_task(everyone())
            loop.run_until_complete(asyncio.sleep(0.5))
            worker = start_celery_worker(own_env, var_dir, name="ssepool")
            streams = loop.run_until_complete(pending)
        finally:
            loop.close()
        assert len(streams) == SUBSCRIBERS
        for types in streams:
            assert types == ["run.started", "node.started", "node.completed", "run.completed"], daphne.log()[-3000:]
    finally:
        if worker is not None:
            worker.stop()
        daphne.stop()
