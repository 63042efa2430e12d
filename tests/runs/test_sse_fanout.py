"""Many subscribers of one run share its log reads (apps/core/fanout.py, issue 11 scenario 5).

A real uvicorn serves SUBSCRIBERS streams of one run, all open before the worker starts it; each
must get every event, in order, through `run.completed`. uvicorn runs with DEBUG logging, and every
read of a run's log for its streams (the shared read and each subscriber's own replay) writes one
"run log read" line (apps.runs.views._stream_read). With the old per-subscriber fetch every stream
read the log on every wake-up and every 0.5 s poll for the ~6 s the run lasts (well over 10 reads
per subscriber, over 500 in all); fanned out, each subscriber reads once (its replay) and the feed
reads once per wake-up or poll, however many subscribers there are. A first subscriber with a
Last-Event-ID beyond the log's end starts the feed: it must start at the log's head anyway (else
every later subscriber falls behind it and polls the log on its own: ~1,600 reads measured).
"""

from __future__ import annotations

import asyncio
import json

import httpx
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from tests.live import start_celery_worker, start_web

SUBSCRIBERS = 50
EXPECTED = ["run.started", "node.started", "node.completed", "run.completed"]


async def _subscribe(
    client: httpx.AsyncClient, key: str, run_id: str, last_event_id: int | None = None
) -> list[tuple[int, str]]:
    received: list[tuple[int, str]] = []
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        sequence = None
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                sequence = int(line[4:])
            elif line.startswith("data:"):
                doc = json.loads(line[5:])
                assert doc["sequence"] == sequence
                received.append((sequence, doc["type"]))
                if doc["type"] == "run.completed":
                    break
    return received


def test_fifty_subscribers_get_every_event_from_shared_reads(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    queue = f"{env['OPENWOP_CELERY_QUEUE']}-ssefan"
    own_env = {**env, "OPENWOP_CELERY_QUEUE": queue, "DJANGO_LOG_LEVEL": "DEBUG", "OPENWOP_MAX_STREAMS_PER_KEY": "0"}
    daphne, base_url = start_web(own_env, var_dir)
    worker = None
    try:
        key = make_key("acme")
        client = OpenwopClient(base_url=base_url, api_key=key, timeout=30)
        run_id = client.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 6000})).runId

        async def everyone() -> list[list[tuple[int, str]]]:
            limits = httpx.Limits(max_connections=SUBSCRIBERS + 5)
            async with httpx.AsyncClient(base_url=base_url, timeout=90, limits=limits) as http:
                # First, a cursor from the future: the feed it starts must still begin at the log's
                # head, or everyone after it would read the log on their own.
                future = asyncio.create_task(_subscribe(http, key, run_id, last_event_id=10**9))
                await asyncio.sleep(0.5)
                subscribers = [asyncio.create_task(_subscribe(http, key, run_id)) for _ in range(SUBSCRIBERS)]
                await asyncio.sleep(1.5)  # every stream open before the worker starts the run
                done = await asyncio.gather(*subscribers)
                # It gets nothing, and closes once the run has ended rather than holding its slot
                # forever (issue 33 item 12).
                assert await asyncio.wait_for(future, 60) == [], "a stream after the log's end got something"
                return done

        loop = asyncio.new_event_loop()
        try:
            pending = loop.create_task(everyone())
            loop.run_until_complete(asyncio.sleep(1.0))
            worker = start_celery_worker(own_env, var_dir, name="ssefan", loglevel="info")
            streams = loop.run_until_complete(pending)
        finally:
            loop.close()
        log = daphne.log()
        assert len(streams) == SUBSCRIBERS
        for received in streams:
            assert [t for _, t in received] == EXPECTED, log[-3000:]
            assert [s for s, _ in received] == sorted(s for s, _ in received)
        reads = sum(1 for line in log.splitlines() if "run log read" in line and run_id in line)
        assert reads >= SUBSCRIBERS, "the read counter is not counting (apps.runs.views._stream_read)"
        # One replay per subscriber plus the feed's reads; per-subscriber fetching is > 600.
        assert reads < 3 * SUBSCRIBERS, f"{reads} log reads for {SUBSCRIBERS} subscribers"
        # The server's door serves these streams: the feed itself wrote the events to the
        # subscribers (FanOut.send_to), one loop per batch, rather than a generator apiece.
        pushes = [line for line in log.splitlines() if "fan-out wrote up to" in line]
        direct = sum(int(line.split(": ")[-1].split(" at once")[0]) for line in pushes)
        assert pushes and direct >= SUBSCRIBERS, log[-3000:]
    finally:
        if worker is not None:
            worker.stop()
        daphne.stop()
