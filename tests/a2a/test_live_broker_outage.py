"""Black-box: a broker outage (issue 32 item 8). With the host's Redis stopped and its database up,
a SendMessage that needs a worker answers its task, committed and SUBMITTED, never an error; once
Redis is back the client's retry (the same messageId) re-sends the run and the sweeper sends the
ones nobody retried, and every one completes. The host, its worker and their Redis are this test's
own (tests/hardening/services.py: the shared Redis is never stopped). The database stays up.
tests/hardening/test_fault_redis.py takes the channel layer's Redis down with the broker up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotFoundError

from apps.runs.models import Run, RunStatus
from tests.a2a.live import Session, db_read, live_card, only_task, until_terminal, user_message
from tests.hardening.services import PrivateRedis, private_redis
from tests.live import LiveProcess, process_env, start_celery_worker, start_web


@dataclass
class OutageHost:
    """A live web server and worker on a Redis of their own, which the test kills and restarts."""

    url: str
    env: dict[str, str]
    var_dir: Path
    redis: PrivateRedis
    web: LiveProcess
    worker: LiveProcess | None


@pytest.fixture
def outage_host(transactional_db, tmp_path: Path, worker_id: str) -> Iterator[OutageHost]:  # type: ignore[no-untyped-def]
    with private_redis() as redis:
        env = process_env(
            worker_id,
            tmp_path,
            REDIS_URL=redis.url,
            CELERY_BROKER_URL=redis.url,  # the broker is the Redis under test here
            OPENWOP_CELERY_QUEUE=f"openwop-outage-{uuid.uuid4().hex[:12]}",
        )
        web, base_url = start_web(env, tmp_path)
        host = OutageHost(base_url, env, tmp_path, redis, web, start_celery_worker(env, tmp_path, name="outage"))
        try:
            yield host
        finally:
            for live in (host.worker, host.web):
                if live is not None:
                    live.stop()


def _run(task_id: str) -> Run:
    return Run.unscoped_all_tenants.get(run_id=task_id)


@pytest.mark.slow
async def test_a_send_during_a_broker_outage_answers_its_task_and_the_run_completes_once_it_is_back(
    outage_host: OutageHost, make_key
) -> None:  # type: ignore[no-untyped-def]
    keys = {"acme": await db_read(lambda: make_key("acme")), "globex": await db_read(lambda: make_key("globex"))}
    card = await live_card(outage_host.url)
    acme_session, globex_session = Session(card, "JSONRPC", keys["acme"]), Session(card, "JSONRPC", keys["globex"])
    acme, globex = acme_session.client(), globex_session.client()
    try:
        delay = {"delayMs": 50}
        # The host works: a run a worker must advance completes.
        warm = await only_task(acme, user_message(prefix="warm", data=delay, skill="conformance-delay"))
        assert warm.status.state == TaskState.TASK_STATE_COMPLETED

        # No worker and no broker: nothing can start a run but what this test does next.
        assert outage_host.worker is not None
        outage_host.worker.stop()
        outage_host.worker = None
        outage_host.redis.kill()

        retried = user_message(prefix="outage", data=delay, skill="conformance-delay")
        blocking = await only_task(acme, retried)  # a blocking send: answered, not -32603
        assert blocking.status.state == TaskState.TASK_STATE_SUBMITTED
        left = await only_task(
            acme, user_message(prefix="outage", data=delay, skill="conformance-delay"), immediately=True
        )
        assert left.status.state == TaskState.TASK_STATE_SUBMITTED
        for task in (blocking, left):
            run = await db_read(partial(_run, task.id))
            # Committed, and marked as never sent (what the sweeper and a retry look for).
            assert run.status == RunStatus.PENDING and run.enqueued_at is None and run.lease_owner == ""
        # Another tenant's reads of them are the unknown task's, outage or not.
        with pytest.raises(TaskNotFoundError):
            await globex.get_task(GetTaskRequest(id=blocking.id))
        log = outage_host.web.log()
        assert "runs.advance not sent" in log and "Traceback" not in log

        outage_host.redis.start()  # the same port: the host's URL
        # The client's retry (same messageId) answers the same task and re-sends its run.
        again = await only_task(acme, retried, immediately=True)
        assert again.id == blocking.id
        assert (await db_read(lambda: _run(blocking.id))).enqueued_at is not None
        assert (await db_read(lambda: _run(left.id))).enqueued_at is None  # nobody retried this one

        # A worker comes back: it runs the re-sent run; its sweeper sends the other.
        outage_host.worker = start_celery_worker(outage_host.env, outage_host.var_dir, name="outage-back")
        for task in (blocking, left):
            assert (await until_terminal(acme, task.id)).status.state == TaskState.TASK_STATE_COMPLETED
    finally:
        await acme_session.close()
        await globex_session.close()
