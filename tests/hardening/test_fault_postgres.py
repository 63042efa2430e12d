"""PostgreSQL restarted mid-run (issue 12 §Fault injection): a private cluster (initdb + pg_ctl in
a temp dir, never the machine's shared server) backs a live uvicorn and Celery worker; a run is
started, the cluster is stopped while the worker is executing it and started again, and the run
completes on its own (the worker's failed step is re-enqueued by the lease sweeper). No response
while the database is gone carries a stack trace or HTML."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.hardening.services import private_postgres
from tests.live import ROOT, process_env, start_celery_worker, start_web, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not any(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
        reason="no PostgreSQL server binaries to start a cluster",
    ),
]


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_run_completes_after_postgres_restarts(tmp_path: Path) -> None:
    with private_postgres() as cluster:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE openwop_fault")
        env = process_env("fault", tmp_path)
        env.update(
            {
                "DATABASE_URL": cluster.url.rsplit("/", 1)[0] + "/openwop_fault",
                "REDIS_URL": "",  # in-memory layer, local cache: only the database is under test
                "CELERY_BROKER_URL": "filesystem://",
                "OPENWOP_RUN_LEASE_SECONDS": "3",
            }
        )
        env.pop("PYTEST_XDIST_TESTRUNUID", None)
        _manage(env, "migrate", "--noinput", "-v", "0")
        key = _manage(env, "create_api_key", "--tenant", "acme").strip().splitlines()[-1]
        web, base = start_web(env, tmp_path)
        worker = start_celery_worker(env, tmp_path, name="pg-restart")
        outage: list[int] = []
        try:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
                created = client.post("/runs", json={"workflowId": "conformance-delay", "inputs": {"delayMs": 4000}})
                assert created.status_code == 201, created.text
                path = f"/runs/{created.json()['runId'].replace('/', '~2F')}"
                wait_until(lambda: client.get(path).json()["status"] == "running", "the run to start")

                started = time.monotonic()
                cluster.stop("fast")  # the worker is inside the delay node, polling the run
                for _ in range(3):
                    response = client.get(path)
                    outage.append(response.status_code)
                    assert "Traceback" not in response.text and "<html" not in response.text.lower()
                    assert response.headers["content-type"].startswith("application/json")
                time.sleep(2)
                cluster.start()
                down_for = time.monotonic() - started

                def completed() -> bool:
                    try:
                        return client.get(path).json()["status"] == "completed"
                    except (httpx.HTTPError, ValueError):
                        return False

                wait_until(completed, f"the run to complete after the restart\n{worker.log()[-3000:]}", timeout=90)
                events = httpx.get(f"{base}{path}/events/poll", headers={"Authorization": f"Bearer {key}"}).json()
                types = [e["type"] for e in events["events"]]
                assert types[-1] == "run.completed" and types.count("run.completed") == 1
                sequences = [e["sequence"] for e in events["events"]]
                assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
                print(f"postgres down {down_for:.1f}s; answers while down: {outage}")
        finally:
            worker.stop()
            web.stop()
