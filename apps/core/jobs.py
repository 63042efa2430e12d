"""Scheduled jobs' last outcomes (JobStatus) and /metrics' readings of them (issue 51 item 3).

Beat's jobs run on whichever worker takes them, and an operator asks when each last succeeded and
what the last retention or chain pass did. Each outcome is one upsert in PostgreSQL by the process
that ran the job: a beat job's success and failure from Celery's task signals
(openwop_host/task_signals.py), a pass's counts from the service that made them
(`job_succeeded(name, detail)`: retention, the chainer, `audit_verify`). /metrics reads the table
when scraped (a row per job), so every web process reports the same values however many workers
there are and wherever they run (the chart's worker pods included), and a restart forgets nothing.

Recording never fails the job: a database that refuses the upsert costs a warning, not the pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from prometheus_client.core import GaugeMetricFamily

from apps.core.models import JobStatus

logger = logging.getLogger(__name__)

_TABLE = JobStatus._meta.db_table
# The database's clock (`now()`), as the heartbeats: workers and web processes never compare clocks.
_SUCCEEDED_SQL = f"""
INSERT INTO {_TABLE} (name, succeeded_at, detail) VALUES (%s, now(), %s::jsonb)
ON CONFLICT (name) DO UPDATE SET succeeded_at = now(), detail = EXCLUDED.detail
"""  # noqa: S608 (our own table name; every value is a parameter)
_SUCCEEDED_KEEP_SQL = f"""
INSERT INTO {_TABLE} (name, succeeded_at, detail) VALUES (%s, now(), '{{}}'::jsonb)
ON CONFLICT (name) DO UPDATE SET succeeded_at = now()
"""  # noqa: S608
_FAILED_SQL = f"""
INSERT INTO {_TABLE} (name, failed_at, detail) VALUES (%s, now(), '{{}}'::jsonb)
ON CONFLICT (name) DO UPDATE SET failed_at = now()
"""  # noqa: S608


# The job names the running task recorded an outcome for itself (a service's pass with its counts, a
# refused retention pass's failure): its success signal then writes nothing more for them
# (openwop_host/task_signals.py opens one set per task). None outside a task.
_recorded: ContextVar[set[str] | None] = ContextVar("openwop_jobs_recorded", default=None)


def task_outcomes_begin() -> Token[set[str] | None]:
    return _recorded.set(set())


def task_outcomes_end(token: Token[set[str] | None]) -> None:
    _recorded.reset(token)


def recorded_here(name: str) -> bool:
    """The running task already recorded `name`'s outcome."""
    recorded = _recorded.get()
    return recorded is not None and name in recorded


def scheduled_jobs() -> list[str]:
    """The task names beat sends (settings.CELERY_BEAT_SCHEDULE), sorted: the `job` label's values."""
    return sorted({str(entry["task"]) for entry in getattr(settings, "CELERY_BEAT_SCHEDULE", {}).values()})


def job_succeeded(name: str, detail: dict[str, Any] | None = None) -> None:
    """`name` succeeded now; `detail` (counts) replaces what its last pass did, None keeps it."""
    if detail is None:
        _record(_SUCCEEDED_KEEP_SQL, [name], name)
    else:
        _record(_SUCCEEDED_SQL, [name, json.dumps(detail)], name)


def job_failed(name: str) -> None:
    """`name` failed now (raised, or refused to do its pass); its last success stays as it was."""
    _record(_FAILED_SQL, [name], name)


def _record(sql: str, params: list[Any], name: str) -> None:
    recorded = _recorded.get()
    if recorded is not None:
        recorded.add(name)
    try:
        with transaction.atomic(), connection.cursor() as cursor:  # a savepoint inside a caller's transaction
            cursor.execute(sql, params)
    except DatabaseError as exc:
        logger.warning("job %s: its outcome was not recorded (%s)", name, type(exc).__name__, extra={"job": name})


def job_status(name: str) -> JobStatus | None:
    return JobStatus.objects.filter(name=name).first()


def _timestamp(at: Any) -> float:
    return at.timestamp() if at is not None else 0.0


def job_gauges() -> Iterator[GaugeMetricFamily]:
    """Scrape-time readings: each beat job's last success and failure (0: never, since the table
    exists), whichever process ran it."""
    rows = {row.name: row for row in JobStatus.objects.filter(name__in=scheduled_jobs())}
    succeeded = GaugeMetricFamily(
        "openwop_beat_job_last_success_timestamp_seconds",
        "When each beat job (its task name) last succeeded, in Unix seconds; 0 if never.",
        labels=["job"],
    )
    failed = GaugeMetricFamily(
        "openwop_beat_job_last_failure_timestamp_seconds",
        "When each beat job (its task name) last raised, in Unix seconds; 0 if never.",
        labels=["job"],
    )
    for job in scheduled_jobs():
        row = rows.get(job)
        succeeded.add_metric([job], _timestamp(row.succeeded_at if row else None))
        failed.add_metric([job], _timestamp(row.failed_at if row else None))
    yield succeeded
    yield failed


def detail_gauges(
    name: str, *, prefix: str, what: str, counts: dict[str, tuple[str, str]]
) -> Iterator[GaugeMetricFamily]:
    """The readings of job `name`'s last pass, for the app that owns it: `{prefix}_timestamp_seconds`
    (when it last succeeded, 0 if never) and a gauge `{prefix}_{suffix}` per `counts` entry
    (suffix -> (detail key, help text)), 0 when the pass did not report it."""
    row = job_status(name)
    detail = row.detail if row is not None and isinstance(row.detail, dict) else {}
    yield GaugeMetricFamily(
        f"{prefix}_timestamp_seconds", f"When {what} last succeeded, in Unix seconds; 0 if never.",
        value=_timestamp(row.succeeded_at if row else None),
    )  # fmt: skip
    for suffix, (key, help_text) in counts.items():
        value = detail.get(key, 0)
        yield GaugeMetricFamily(
            f"{prefix}_{suffix}", help_text, value=float(value) if isinstance(value, int | float) else 0.0
        )
