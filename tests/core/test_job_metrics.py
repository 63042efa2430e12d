"""What an operator cannot otherwise see (issue 51 item 3), in a live host's /metrics: each beat
job's last success and failure, the last retention pass and what it expired, the chainer's and
`audit_verify`'s last passes, the records in the default partition and the messages waiting in
each Celery queue.

The beat jobs run as beat sends them (their task by name, from a process of the host's own, to the
live Celery worker's queue); `audit_verify` as an operator runs it; then a real scrape of a live
web process, which reads them from PostgreSQL and the broker, whichever process did the work."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from apps.agents.services import workflow_fixtures_seed
from apps.audit.models import HostEvent
from apps.core.jobs import scheduled_jobs
from apps.core.models import JobStatus
from apps.retention.services import APPLY_LOCK_KEY
from apps.runs.models import Run
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.audit.old_writers import prechain_group_append
from tests.audit.records import record_at
from tests.live import ROOT, start_web, wait_until
from tests.metrics_samples import Samples, samples_of
from tests.retention.conftest import ended_days_ago

pytestmark = pytest.mark.django_db(transaction=True)


_BROKER = """
import json, sys, django
django.setup()
from openwop_host.celery import app
sends, purges = json.loads(sys.argv[1])
for name, args, queue in sends:
    app.send_task(name, args=args, queue=queue)
with app.connection_for_write() as broker:
    for queue in purges:
        try:
            broker.default_channel.queue_purge(queue)
        except Exception:  # never declared on this transport: nothing to empty
            pass
"""


def _broker(env: dict[str, str], *, send: list[tuple[str, list[Any], str]] | None = None,
            purge: list[str] | None = None) -> None:  # fmt: skip
    """Send tasks by name (as beat does) or empty queues, from a process with the live env: the
    live processes' broker, whichever transport it is."""
    subprocess.run(
        [sys.executable, "-c", _BROKER, json.dumps([send or [], purge or []])],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "openwop_host.settings"}, check=True, timeout=120,
    )  # fmt: skip


def _scrape(base_url: str) -> tuple[Samples, str]:
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text[:500]
    return samples_of(response.text), response.text


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _status(name: str) -> JobStatus | None:
    try:
        return JobStatus.objects.filter(name=name).first()
    finally:
        connection.close()


def _ran_since(name: str, since: datetime, field: str = "succeeded_at") -> JobStatus | None:
    row = _status(name)
    return row if row is not None and getattr(row, field) is not None and getattr(row, field) > since else None


def _ended(run_id: str) -> bool:
    try:
        return Run.unscoped_all_tenants.filter(run_id=run_id, completed_at__isnull=False).exists()
    finally:
        connection.close()


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def test_beat_jobs_and_their_passes_reach_a_live_scrape(
    live_url: str, live_worker: Any, live_env: Any, make_key: Any
) -> None:
    env, _ = live_env
    queue = env["OPENWOP_CELERY_QUEUE"]  # what the live worker consumes
    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    client = OpenwopClient(base_url=live_url, api_key=key, timeout=30)
    ended = [client.runs_create(CreateRunRequest(workflowId="conformance-noop", inputs={})).runId for _ in range(2)]
    for run_id in ended:
        wait_until(lambda: _ended(run_id), "the run to end")  # noqa: B023 (waited for here)
        ended_days_ago(run_id, 31, now=timezone.now())  # the host keeps runs 30 days

    # Every beat job has its series before it ever ran (0: never), each labelled by its task name.
    before, _ = _scrape(live_url)
    for job in scheduled_jobs():
        assert _value(before, "openwop_beat_job_last_success_timestamp_seconds", job=job) is not None, job
    assert len(scheduled_jobs()) >= 6

    # Retention, as beat sends it, on the live worker: the two runs expire.
    since = _db_now()
    _broker(env, send=[("retention.apply", [], queue)])
    retention = wait_until(lambda: _ran_since("retention.apply", since), "the retention pass")
    # The chainer, likewise: it links the three records a pre-chain writer left (written after the
    # retention pass, which links what it finds behind before it expires records).
    prechain_group_append(subject_from_api_key(key), [{"n": n} for n in range(3)])
    since = _db_now()
    _broker(env, send=[("audit.chain_pending", [], queue)])
    chainer = wait_until(lambda: _ran_since("audit.chain_pending", since), "the chainer's pass")
    # audit_verify, as an operator runs it (every tenant): what it read, and that it is intact.
    call_command("audit_verify", stdout=StringIO())
    records = HostEvent.unscoped_all_tenants.count()
    verify = _status("audit.verify")
    assert verify is not None and records >= 3

    after, text = _scrape(live_url)
    assert _value(after, "openwop_beat_job_last_success_timestamp_seconds", job="retention.apply") == (
        retention.succeeded_at.timestamp()
    )
    assert _value(after, "openwop_retention_last_pass_timestamp_seconds") == retention.succeeded_at.timestamp()
    assert _value(after, "openwop_retention_last_pass_runs_expired") == 2
    # What the pass itself recorded (a record partition an earlier test of this database left past
    # the window is dropped by this pass: the count is the pass's, whatever the order of tests).
    assert _value(after, "openwop_retention_last_pass_partitions_dropped") == retention.detail["partitions_dropped"]
    assert _value(after, "openwop_retention_last_pass_duration_seconds") > 0  # type: ignore[operator]
    assert _value(after, "openwop_beat_job_last_success_timestamp_seconds", job="audit.chain_pending") == (
        chainer.succeeded_at.timestamp()
    )
    assert _value(after, "openwop_audit_chainer_last_pass_records_linked") == 3
    assert _value(after, "openwop_audit_chainer_last_pass_streams_behind") == 0
    assert _value(after, "openwop_audit_verify_last_pass_timestamp_seconds") == verify.succeeded_at.timestamp()
    assert _value(after, "openwop_audit_verify_last_pass_records") == records
    assert _value(after, "openwop_audit_verify_last_pass_broken_streams") == 0
    assert "acme" not in text and key not in text  # no tenant in a label


def test_a_refused_retention_pass_is_a_failure_not_a_success(live_url: str, live_worker: Any, live_env: Any) -> None:
    """Another pass holds the job's lock: the worker's pass is refused and returns; the scrape shows
    the failure, and the last success where it was."""
    env, _ = live_env
    earlier = _status("retention.apply")
    since = _db_now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [APPLY_LOCK_KEY])
    try:
        _broker(env, send=[("retention.apply", [], env["OPENWOP_CELERY_QUEUE"])])
        failed = wait_until(lambda: _ran_since("retention.apply", since, "failed_at"), "the refused pass")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [APPLY_LOCK_KEY])
    samples, _ = _scrape(live_url)
    assert _value(samples, "openwop_beat_job_last_failure_timestamp_seconds", job="retention.apply") == (
        failed.failed_at.timestamp()
    )
    unchanged = earlier.succeeded_at.timestamp() if earlier is not None and earlier.succeeded_at else 0.0
    assert failed.succeeded_at == (earlier.succeeded_at if earlier is not None else None)
    assert _value(samples, "openwop_beat_job_last_success_timestamp_seconds", job="retention.apply") == unchanged


def test_queue_depth_and_default_partition_rows_in_a_live_scrape(live_env: Any, make_key: Any) -> None:
    env, var_dir = live_env
    # A web process whose queues nobody consumes: what is sent there waits.
    queue = f"openwop-depth-{uuid.uuid4().hex[:8]}"
    env = {**env, "OPENWOP_CELERY_QUEUE": queue}
    web, base_url = start_web(env, var_dir)
    try:
        sends: list[tuple[str, list[Any], str]] = [("runs.advance", [f"acme/never-{n}"], queue) for n in range(3)]
        _broker(env, send=sends + [("push.deliver", [0], f"{queue}-push")] * 2)
        # Two records past every partition (beat stopped for years): the default partition's.
        subject = subject_from_api_key(make_key("acme"))
        for day in (3, 4):
            record_at(subject, datetime(2041, 6, day, 12, tzinfo=UTC))
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM audit_hostevent_default")
            in_default = cursor.fetchone()[0]
        assert in_default >= 2

        samples, _ = _scrape(base_url)
        assert _value(samples, "openwop_celery_queue_length", queue=queue) == 3
        assert _value(samples, "openwop_celery_queue_length", queue=f"{queue}-push") == 2
        assert _value(samples, "openwop_records_default_partition_rows") == in_default
    finally:
        web.stop()
        _broker(env, purge=[queue, f"{queue}-push"])


def test_an_unreachable_broker_leaves_the_queue_gauge_empty_not_the_scrape(live_env: Any) -> None:
    """Fail-open: the queue lengths cannot be read, every other reading still is."""
    env, var_dir = live_env
    web, base_url = start_web({**env, "CELERY_BROKER_URL": "redis://127.0.0.1:9/0"}, var_dir)  # discard port
    try:
        samples, text = _scrape(base_url)
        assert "# TYPE openwop_celery_queue_length gauge" in text
        assert not [labels for (name, labels) in samples if name == "openwop_celery_queue_length"]
        assert _value(samples, "openwop_records_default_partition_rows") is not None
        assert "127.0.0.1:9" not in web.log()  # the warning names the error's class, never the URL
    finally:
        web.stop()
