"""Redis taken down under a live host (issue 12 §Fault injection). The host's Redis (channel layer
wake-ups, limit counters) is a private redis-server this test SIGKILLs; the Celery broker stays
what the suite uses. REST and A2A unary calls keep working, a stream opened before the failure
falls back to database polling and delivers every event in order, rate limits fail open, and
after Redis returns everything still works."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.runs.models import Run, RunEvent
from apps.tenants.models import Tenant
from tests.audit.sse_frames import FrameReader
from tests.hardening.services import private_redis
from tests.live import start_celery_worker, start_web, wait_until


def _frames(url: str, headers: dict[str, str], out: list[dict[str, Any]], stop: str) -> None:
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        reader = FrameReader(response)
        while True:
            frame = reader.next_frame()
            out.append({"id": int(frame.id or 0), "event": frame.event, "data": frame.data})
            if frame.event == stop:
                return


def _contiguous(run_id: str) -> list[int]:
    return list(
        RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).order_by("sequence").values_list("sequence", flat=True)
    )


@pytest.mark.slow
@pytest.mark.usefixtures("transactional_db")
def test_redis_down_keeps_the_wire_working(live_env: Any, make_key: Callable[..., str]) -> None:
    env, var_dir = live_env
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    headers = {"Authorization": f"Bearer {key}"}
    with private_redis() as redis:
        own_env = {
            **env,
            "REDIS_URL": redis.url,
            # The broker is not the Redis under test (its loss is Celery's failure mode, not ours).
            "CELERY_BROKER_URL": env.get("CELERY_BROKER_URL") or env.get("REDIS_URL") or "filesystem://",
            "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-redis-down",
        }
        web, base = start_web(own_env, var_dir)
        worker = start_celery_worker(own_env, var_dir, name="redis-down")
        try:
            with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
                approval = client.post("/runs", json={"workflowId": "conformance-approval"}).json()["runId"]
                events_url = f"{base}/runs/{approval.replace('/', '~2F')}/events"
                frames: list[dict[str, Any]] = []
                reader = threading.Thread(target=_frames, args=(events_url, headers, frames, "run.completed"))
                reader.start()
                wait_until(lambda: any(f["event"] == "node.suspended" for f in frames), "the run to suspend")

                redis.kill()

                # REST unary calls, run creation and execution included.
                assert client.get("/runs").status_code == 200
                echo = client.post("/runs", json={"workflowId": "echo", "inputs": {"x": 1}})
                assert echo.status_code == 201, echo.text
                echo_id = echo.json()["runId"]
                wait_until(
                    lambda: client.get(f"/runs/{echo_id.replace('/', '~2F')}").json()["status"] == "completed",
                    "the echo run to complete with Redis down",
                )
                # A2A unary: a blocking SendMessage waits on the run through database polling.
                sent = client.post(
                    "/a2a/jsonrpc",
                    headers={"A2A-Version": "1.0"},
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "SendMessage",
                        "params": {
                            "message": {"messageId": "redis-down-1", "role": "ROLE_USER", "parts": [{"text": "x"}]}
                        },
                    },
                )
                assert sent.status_code == 200 and "result" in sent.json(), sent.text
                task_id = sent.json()["result"]["task"]["id"]
                got = client.post(
                    "/a2a/jsonrpc",
                    headers={"A2A-Version": "1.0"},
                    json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}},
                )
                assert got.status_code == 200 and got.json()["result"]["id"] == task_id

                # The stream opened before the failure sees the rest of the run, by polling.
                resolved = client.post(
                    f"/runs/{approval.replace('/', '~2F')}/interrupts/approve",
                    json={"resumeValue": {"action": "accept"}},
                )
                assert resolved.status_code < 300, resolved.text
                reader.join(timeout=60)
                assert not reader.is_alive() and frames[-1]["event"] == "run.completed"
                assert [f["id"] for f in frames] == _contiguous(approval)  # nothing lost, nothing repeated
                # A stream opened while Redis is down replays the whole log and ends.
                late: list[dict[str, Any]] = []
                _frames(f"{base}/runs/{echo_id.replace('/', '~2F')}/events", headers, late, "run.completed")
                assert [f["id"] for f in late] == _contiguous(echo_id)

                # Redis comes back on the same port: still working, nothing left behind.
                redis.start()
                again = client.post("/runs", json={"workflowId": "echo"})
                assert again.status_code == 201
                again_id = again.json()["runId"]
                wait_until(
                    lambda: Run.unscoped_all_tenants.get(run_id=again_id).status == "completed",
                    "a run after Redis returned",
                )
        finally:
            worker.stop()
            web.stop()
        assert "Traceback" not in web.log(), web.log()[-3000:]
