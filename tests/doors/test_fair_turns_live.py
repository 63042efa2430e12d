"""Fair turns on a live server (apps/core/fair_turns.py, issue 49): with one turn in the process,
tenant A's blocking SendMessage holds it; A's next request and then tenant B's wait for it; when
A's request has held the turn for OPENWOP_FAIR_HOLD_SECONDS it gives the turn up (and goes on
waiting for its run), and the turn goes to B first, the tenant that has used the process least,
although A's second request came earlier. The waits are seen in `openwop_fair_turns_waiting`.

Orders, not durations: B is answered before A's second request, and both before A's blocking one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from apps.runs.models import Run
from tests.a2a.live import db_read
from tests.live import start_web
from tests.metrics_samples import samples_of

pytestmark = pytest.mark.django_db(transaction=True)

HOLD_SECONDS = 8  # long enough to queue two requests behind the holder on a slow machine
DELAY_MS = 60_000  # A's run outlasts the test (cancelled at its end)


@pytest.fixture(scope="module")
def one_turn_host(_live_env, tmp_path_factory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, _ = _live_env
    env = {**env, "OPENWOP_FAIR_SLOTS": "1", "OPENWOP_FAIR_HOLD_SECONDS": str(HOLD_SECONDS)}
    web, base_url = start_web(env, tmp_path_factory.mktemp("fair-turns"))
    yield base_url
    web.stop()


def _rpc(method: str, params: dict[str, Any], n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}


async def _waiting(client: httpx.AsyncClient) -> float:
    answer = await client.get("/metrics")
    assert answer.status_code == 200, answer.text[:300]
    return samples_of(answer.text).get(("openwop_fair_turns_waiting", ()), 0.0)


async def _until_waiting(client: httpx.AsyncClient, count: int) -> None:
    deadline = time.monotonic() + HOLD_SECONDS * 4
    while (seen := await _waiting(client)) < count:
        assert time.monotonic() < deadline, f"{seen} requests waiting for a turn, not {count}"
        await asyncio.sleep(0.05)


async def test_a_freed_turn_goes_to_the_tenant_that_used_the_process_least(
    one_turn_host: str, live_worker: Any, make_key: Any
) -> None:
    a_key, b_key = await asyncio.to_thread(make_key, "fair-a"), await asyncio.to_thread(make_key, "fair-b")
    answered: list[str] = []
    async with httpx.AsyncClient(base_url=one_turn_host, timeout=HOLD_SECONDS * 10) as client:

        async def call(name: str, key: str, body: dict[str, Any]) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
            answer = await client.post("/a2a/jsonrpc", json=body, headers=headers)
            answered.append(name)
            return answer

        # Each key's tenant is learned by the process first (a key's first request takes its
        # key's own turn, not its tenant's).
        assert (await call("a-warm", a_key, _rpc("ListTasks", {}, 0))).status_code == 200
        assert (await call("b-warm", b_key, _rpc("ListTasks", {}, 0))).status_code == 200
        message = {"role": "ROLE_USER", "messageId": "fair-hold", "parts": [{"data": {"delayMs": DELAY_MS}}],
                   "metadata": {"openwop": {"skillId": "conformance-delay"}}}  # fmt: skip
        blocking = asyncio.ensure_future(call("a-blocking", a_key, _rpc("SendMessage", {"message": message}, 1)))
        # Its run exists: the request is in its view, holding the one turn.
        for _ in range(400):
            if await db_read(lambda: Run.unscoped_all_tenants.filter(tenant__slug="fair-a").exists()):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("A's blocking SendMessage made no run")
        a_second = asyncio.ensure_future(call("a-second", a_key, _rpc("ListTasks", {}, 2)))
        await _until_waiting(client, 1)
        b = asyncio.ensure_future(call("b", b_key, _rpc("ListTasks", {}, 3)))
        await _until_waiting(client, 2)
        b_answer, a_answer = await asyncio.wait_for(asyncio.gather(b, a_second), timeout=HOLD_SECONDS * 6)
        assert b_answer.status_code == 200 and a_answer.status_code == 200, (b_answer.text, a_answer.text)
        assert answered == ["a-warm", "b-warm", "b", "a-second"], answered
        assert not blocking.done(), "A's blocking SendMessage gave up its turn and still waits for its run"
        assert await _waiting(client) == 0
        blocking.cancel()
    run = await db_read(lambda: Run.unscoped_all_tenants.get(tenant__slug="fair-a"))
    async with httpx.AsyncClient(base_url=one_turn_host, timeout=30) as client:
        headers = {"Authorization": f"Bearer {a_key}", "A2A-Version": "1.0"}
        await client.post("/a2a/jsonrpc", json=_rpc("CancelTask", {"id": run.run_id}, 4), headers=headers)
