"""A run waiting on the clock holds no worker thread (engine.py: parking): while more delay runs
wait than the worker has threads, another tenant's run still goes through that worker, and a
cancel ends a waiting run at once. A real uvicorn and Celery worker (4 threads, tests/live.py) on
a queue of their own."""

from __future__ import annotations

from openwop_client import OpenwopClient
from openwop_client.types import CancelRunRequest, CreateRunRequest

from apps.runs.models import Run, RunEvent, RunStatus
from tests.live import start_celery_worker, start_web, wait_until

WORKER_THREADS = 4  # start_celery_worker's --concurrency
WAITING = WORKER_THREADS + 2
LONG_DELAY_MS = 600_000  # longer than the test: none of these finishes on its own


def test_runs_waiting_on_the_clock_leave_the_workers_threads_to_others(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    own_env = {**env, "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-parking"}
    web, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="parker")
    try:
        acme = OpenwopClient(base_url=base_url, api_key=make_key("acme"), timeout=30)
        globex = OpenwopClient(base_url=base_url, api_key=make_key("globex"), timeout=30)
        waiting = [
            acme.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": LONG_DELAY_MS})).runId
            for _ in range(WAITING)
        ]

        def all_waiting() -> bool:
            return RunEvent.unscoped_all_tenants.filter(run__run_id__in=waiting, type="node.started").count() == WAITING

        wait_until(all_waiting, f"{WAITING} delay nodes to start on {WORKER_THREADS} threads\n{worker.log()[-3000:]}")
        short = globex.runs_create(CreateRunRequest(workflowId="conformance-noop")).runId
        wait_until(
            lambda: Run.unscoped_all_tenants.get(run_id=short).status == RunStatus.COMPLETED,
            f"another tenant's run to go through the worker\n{worker.log()[-3000:]}",
        )
        # Every delay still waits, each parked: running at its node, held by no thread.
        rows = list(Run.unscoped_all_tenants.filter(run_id__in=waiting))
        assert {(r.status, r.current_node_id, r.lease_owner) for r in rows} == {(RunStatus.RUNNING, "delay", "")}
        for run_id in waiting:  # what every door shows of a delaying run
            assert acme.runs_get(run_id).status == "running"

        # A cancel ends a parked run itself, no worker needed.
        cancelled = acme.runs_cancel(waiting[0], CancelRunRequest(reason="enough"))
        assert cancelled.status == "cancelled"
        events = list(RunEvent.unscoped_all_tenants.filter(run__run_id=waiting[0]).order_by("sequence"))
        assert [e.type for e in events] == ["run.started", "node.started", "node.cancelled", "run.cancelled"]
        for run_id in waiting[1:]:
            acme.runs_cancel(run_id, CancelRunRequest(reason="done"))
        assert not Run.unscoped_all_tenants.filter(run_id__in=waiting).exclude(status=RunStatus.CANCELLED).exists()
    finally:
        worker.stop()
        web.stop()
