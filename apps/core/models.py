"""The host's own bookkeeping tables (no tenant's data)."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """One row per live Celery worker process, rewritten by the process itself every
    OPENWOP_WORKER_HEARTBEAT_SECONDS (apps/core/heartbeats.py); `/readyz` reads it. The row goes
    when the worker stops; a killed worker's row just stops moving (and is pruned a day later)."""

    worker = models.CharField(max_length=255, unique=True)  # celery@<host>/<pid>
    queues = models.JSONField(default=list)  # the queue names it consumes
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.worker
