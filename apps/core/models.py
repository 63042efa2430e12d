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


class BackfillProgress(models.Model):
    """How far one post-deploy backfill (apps/core/backfills.py) has come: the position its next
    batch starts after, committed in the same transaction as the batch, so a stopped backfill
    resumes where it stopped and a batch is never applied twice."""

    name = models.CharField(primary_key=True, max_length=100, help_text="The backfill's registered name.")
    position = models.TextField(blank=True, db_default="", help_text="Where the next batch starts (empty: the start).")
    rows = models.BigIntegerField(db_default=0, help_text="Rows the batches have changed so far.")
    batches = models.IntegerField(db_default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True, help_text="Set once a batch found nothing left.")

    class Meta:
        verbose_name_plural = "backfill progress"

    def __str__(self) -> str:
        return f"{self.name}: {'done' if self.done_at else 'pending'} ({self.rows} rows)"


class JobStatus(models.Model):
    """The last outcome of one scheduled job: a beat job (by its task name: when it last succeeded,
    when it last failed) or a pass an operator runs (`audit_verify`), with what its last successful
    pass did (`detail`, counts). Written by the job's own process (apps/core/jobs.py), read by
    /metrics at scrape time, so every web process of the host reports the same, whichever worker
    ran the job and whether or not it still runs."""

    name = models.CharField(primary_key=True, max_length=100, help_text="The job's task name, e.g. retention.apply.")
    succeeded_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True, help_text="What the last successful pass did (counts).")

    class Meta:
        verbose_name_plural = "job statuses"

    def __str__(self) -> str:
        return self.name
