"""A stream slot dies with its process (issue 49 item 5), on two real uvicorn processes sharing one
Redis, each limiting a key to one open stream with a 3 s slot lease.

The key's stream on the first process holds its slot past several leases (the stream renews it),
so the second process refuses the key's next stream; the first process is then SIGKILLed, and
within a minute the second admits a stream of that key. With the old bare counter (a 3,600 s
TTL) the dead process's slot refused that key for an hour.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import Tenant
from tests.live import start_web, wait_until

LEASE_SECONDS = 3


@pytest.fixture(scope="module")
def leased_env(_live_env):  # type: ignore[no-untyped-def]
    env, _ = _live_env
    if not env.get("REDIS_URL"):
        pytest.skip("REDIS_URL is not set: slots shared between processes live in Redis")
    return {
        **env,
        "OPENWOP_MAX_STREAMS_PER_KEY": "1",
        "OPENWOP_STREAM_SLOT_LEASE_SECONDS": str(LEASE_SECONDS),
        "OPENWOP_STREAM_RECHECK_SECONDS": "1",
    }


@pytest.fixture
def survivor(leased_env, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    live, base_url = start_web(leased_env, tmp_path)
    yield base_url
    live.stop()


def _events_url(base: str, run_id: str) -> str:
    return f"{base}/runs/{run_id.replace('/', '~2F')}/events"


def test_a_killed_processs_stream_slots_free_within_a_minute(
    leased_env, survivor, tmp_path, make_key, transactional_db
) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    auth = {"Authorization": f"Bearer {key}"}
    (tmp_path / "doomed").mkdir()
    doomed, doomed_url = start_web(leased_env, tmp_path / "doomed")
    try:
        created = httpx.post(f"{doomed_url}/runs", json={"workflowId": "conformance-approval"}, headers=auth)
        assert created.status_code == 201, created.text
        url = _events_url(doomed_url, created.json()["runId"])
        with contextlib.ExitStack() as held:
            stream = held.enter_context(httpx.stream("GET", url, headers=auth, timeout=30))
            assert stream.status_code == 200
            # Held past several leases: its stream renews the slot, so the other process refuses.
            time.sleep(3 * LEASE_SECONDS)
            other = httpx.get(url.replace(doomed_url, survivor), headers=auth, timeout=10)
            assert other.status_code == 429 and other.json()["error"] == "rate_limited", other.text

            doomed.proc.kill()  # SIGKILL: nothing is released, nothing renews any more
            doomed.proc.wait(timeout=15)
            held.pop_all()  # the connection is dead; closing it is not the server giving anything back
        with contextlib.suppress(httpx.HTTPError):
            stream.close()

        def admitted() -> bool:
            with httpx.stream("GET", url.replace(doomed_url, survivor), headers=auth, timeout=10) as again:
                return again.status_code == 200

        assert wait_until(admitted, "the killed process's stream slot to free itself", timeout=60)
    finally:
        doomed.stop(kill=True)
