"""A worker SIGKILLed in the middle of a `delay` node: the run still completes once a new worker
starts, waiting only what remains of the delay measured from its one `node.started` (engine.py:
leases, parking, the sweeper, idempotent steps).

The wait is parked, so the worker is killed holding no lease: what dies with it is its in-memory
clock for the run, and the replacement's sweeper wakes the run instead, once it is due. The test
runs its own uvicorn and workers on a queue of their own, so no other worker of the test session
can pick the run up: after the kill, only the replacement worker can finish it.
"""

from __future__ import annotations

import signal
from datetime import timedelta

from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from apps.runs.models import Run, RunEvent, RunStatus
from tests.live import start_celery_worker, start_web, wait_until

DELAY_MS = 4000


def test_a_run_survives_its_worker_being_killed_mid_delay(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    queue = f"{env['OPENWOP_CELERY_QUEUE']}-kill"
    # A short lease keeps the test quick where settings read OPENWOP_RUN_LEASE_SECONDS.
    own_env = {**env, "OPENWOP_CELERY_QUEUE": queue, "OPENWOP_RUN_LEASE_SECONDS": "3"}
    daphne, base_url = start_web(own_env, var_dir)
    first = start_celery_worker(own_env, var_dir, name="doomed")
    replacement = None
    try:
        client = OpenwopClient(base_url=base_url, api_key=make_key("acme"), timeout=30)
        run_id = client.runs_create(
            CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": DELAY_MS})
        ).runId
        assert Run.unscoped_all_tenants.get(run_id=run_id).queue == queue

        def doomed_worker_parked_the_delay() -> RunEvent | None:
            run = Run.unscoped_all_tenants.get(run_id=run_id)
            started = RunEvent.unscoped_all_tenants.filter(run=run, type="node.started").first()
            parked = started is not None and run.lease_owner == "" and run.wake_at > started.at
            return started if parked else None

        started = wait_until(doomed_worker_parked_the_delay, "the first worker to start and park the delay node")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=15)
        assert first.proc.returncode == -signal.SIGKILL
        run = Run.unscoped_all_tenants.get(run_id=run_id)
        # Durable: the wake-up time is the delay's end measured from the logged node.started.
        assert run.status == RunStatus.RUNNING and run.wake_at == started.at + timedelta(milliseconds=DELAY_MS)

        replacement = start_celery_worker(own_env, var_dir, name="replacement")
        wait_until(
            lambda: Run.unscoped_all_tenants.get(run_id=run_id).status == RunStatus.COMPLETED,
            f"the replacement worker to finish the run\n{replacement.log()[-3000:]}",
        )
        events = list(RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).order_by("sequence"))
        assert [e.type for e in events] == ["run.started", "node.started", "node.completed", "run.completed"]
        assert [e.sequence for e in events] == [1, 2, 3, 4]
        # Completed no earlier than the delay measured from the one node.started: resumed, not restarted.
        assert events[2].at - events[1].at >= timedelta(milliseconds=DELAY_MS)
        assert events[2].payload == {"nodeId": events[2].node_id, "outputs": {"delayedMs": DELAY_MS}}
        assert Run.unscoped_all_tenants.get(run_id=run_id).lease_owner == ""
    finally:
        first.stop(kill=True)
        if replacement is not None:
            replacement.stop()
        daphne.stop()
