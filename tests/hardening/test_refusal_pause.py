"""A rate refusal waits out a short pause before it is answered (issue 49 item 3), so a flood on a
few connections sends a few requests a second instead of thousands the host spends its CPU
refusing; at most OPENWOP_REFUSAL_PAUSE_MAX refusals wait at once, the rest are answered at once.
On a real uvicorn, through the A2A door (served from the event loop) and the REST wire.

No timing is asserted: with one pause slot, of two refused requests sent together one is answered
while the other is still waiting (an order, not a duration), and the waiting one is then answered
with the same refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.live import start_web

PAUSE_SECONDS = 8  # long beside an immediate answer, short for the suite


@pytest.fixture(scope="module")
def pausing_host(_live_env, tmp_path_factory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, _ = _live_env
    env = {
        **env,
        "OPENWOP_RATE_LIMIT_REQUESTS": "1",
        "OPENWOP_RATE_LIMIT_WINDOW_SECONDS": "86400",  # no window boundary inside the test
        "OPENWOP_REFUSAL_PAUSE_SECONDS": str(PAUSE_SECONDS),
        "OPENWOP_REFUSAL_PAUSE_MAX": "1",
    }
    web, base_url = start_web(env, tmp_path_factory.mktemp("refusal-pause"))
    yield base_url
    web.stop()


def _get_task(client: httpx.AsyncClient, key: str) -> asyncio.Task[httpx.Response]:
    body = {"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "no-such-task"}}
    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    return asyncio.ensure_future(client.post("/a2a/jsonrpc", json=body, headers=headers))


def _assert_rate_refusal(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text  # the JSON-RPC error, with the HTTP status beside it
    assert answer.json()["id"] == 3 and answer.json()["error"]["code"] == -32000, answer.text
    assert int(answer.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("door", ["a2a", "rest"])
async def test_one_refusal_waits_its_pause_and_the_next_is_answered_at_once(
    pausing_host: str,
    make_key,
    transactional_db,
    door: str,  # type: ignore[no-untyped-def]
) -> None:
    key = await asyncio.to_thread(make_key, f"pause-{door}")
    async with httpx.AsyncClient(base_url=pausing_host, timeout=PAUSE_SECONDS * 6) as client:

        def send() -> asyncio.Task[httpx.Response]:
            if door == "a2a":
                return _get_task(client, key)
            return asyncio.ensure_future(client.get("/runs", headers={"Authorization": f"Bearer {key}"}))

        first = await send()  # the key's one request of the window: admitted
        assert first.status_code == 200, first.text
        refused = [send(), send()]
        done, pending = await asyncio.wait(refused, timeout=PAUSE_SECONDS * 4, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1 and len(pending) == 1, "one refusal answered at once, the other still pausing"
        (waiting,) = pending
        answers = [done.pop().result(), await asyncio.wait_for(waiting, timeout=PAUSE_SECONDS * 4)]
    for answer in answers:  # the paused one is the same refusal, only later
        if door == "a2a":
            _assert_rate_refusal(answer)
        else:
            assert answer.status_code == 429 and answer.json()["error"] == "rate_limited", answer.text
            assert int(answer.headers["Retry-After"]) >= 1
