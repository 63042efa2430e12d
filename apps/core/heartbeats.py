"""Worker heartbeats: whether anything consumes the runs' queue right now.

A queue with no consumer accepts work that never runs, and nothing else says so: the broker answers,
the database answers, `/readyz` was 200 while runs piled up `pending`. Every Celery worker process
therefore writes its row (WorkerHeartbeat) every OPENWOP_WORKER_HEARTBEAT_SECONDS from a thread of
its own (openwop_host/worker_heartbeat.py, hooked to Celery's worker signals), and readiness asks
whether one that consumes the queue wrote within three periods. In PostgreSQL, not Redis: the
newcomer's host has no Redis, and a row per process costs one upsert per period. Times are the
database's clock on both sides (`now()`), so workers and web processes on other machines never
compare clocks.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.db import connection

from apps.core.models import WorkerHeartbeat

_TABLE = WorkerHeartbeat._meta.db_table
# A process that died without a word (SIGKILL) leaves its row; a day later it is dropped.
PRUNE_AFTER_SECONDS = 24 * 3600.0
# Readiness's window: a worker is live if it wrote within this many periods.
LIVE_PERIODS = 3

_BEAT_SQL = f"""
INSERT INTO {_TABLE} (worker, queues, started_at, beat_at) VALUES (%s, %s::jsonb, now(), now())
ON CONFLICT (worker) DO UPDATE SET beat_at = now(), queues = EXCLUDED.queues
"""  # noqa: S608 (our own table name; every value is a parameter)
_PRUNE_SQL = f"DELETE FROM {_TABLE} WHERE beat_at < now() - make_interval(secs => %s)"  # noqa: S608
_LIVE_SQL = f"""
SELECT EXISTS (SELECT 1 FROM {_TABLE} WHERE beat_at > now() - make_interval(secs => %s) AND queues ? %s)
"""  # noqa: S608


def heartbeat_period_seconds() -> float:
    """OPENWOP_WORKER_HEARTBEAT_SECONDS; 0 turns heartbeats (and readiness's worker check) off."""
    return float(getattr(settings, "OPENWOP_WORKER_HEARTBEAT_SECONDS", 10.0))


def worker_heartbeat_beat(*, worker: str, queues: list[str]) -> None:
    """This worker process is alive and consumes `queues` (one upsert)."""
    with connection.cursor() as cursor:
        cursor.execute(_BEAT_SQL, [worker, json.dumps(sorted(queues))])


def worker_heartbeat_forget(*, worker: str) -> None:
    """This worker process stops: its row goes at once (readiness need not wait for it to age)."""
    WorkerHeartbeat.objects.filter(worker=worker).delete()


def worker_heartbeats_prune() -> int:
    """Drop the rows of workers that died without a word, long ago."""
    with connection.cursor() as cursor:
        cursor.execute(_PRUNE_SQL, [PRUNE_AFTER_SECONDS])
        return int(cursor.rowcount)


def live_worker_exists(*, queue: str, within_seconds: float) -> bool:
    """Whether some worker consuming `queue` wrote its heartbeat within `within_seconds`."""
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_SQL, [within_seconds, queue])
        row = cursor.fetchone()
    return bool(row and row[0])
