"""Post-deploy backfills: data a release fills in after its migrations, in batches, while it serves
(docs/contributors/migrations.md). Never inside `migrate`: a backfill of a large table in one
transaction holds its locks for minutes and its rows for the whole run.

A backfill is registered by the app that owns its table (`backfill_register` in its AppConfig's
`ready()`), with a `step`: given a cursor inside the batch's transaction, the position the batch
starts after (None: the beginning) and the batch size, it changes at most that many rows and says
where the next batch starts (None: nothing left) and how many rows it changed. The step must be
idempotent per position (a row it already filled is skipped by its own WHERE clause), because a
position only advances when its batch commits.

`backfill_run` drives one: each batch is one short transaction that also moves the backfill's
`BackfillProgress` row (taken `FOR UPDATE SKIP LOCKED`, so the beat job and an operator's command
never run the same backfill at once), under the migrations' lock timeout (a batch that cannot lock
is rolled back and tried again after a pause); between batches it rests, so that it works
OPENWOP_BACKFILL_DUTY of the time. Progress goes to the log after every batch and to /metrics
(`openwop_backfill_rows_total`, and `openwop_backfill_pending` / `openwop_backfill_rows_done` read
from the progress table when scraped). `manage.py backfill` runs them by hand; the beat job
`core.backfills` runs what is pending for OPENWOP_BACKFILL_TICK_SECONDS each minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from apps.core.migration_locks import is_lock_timeout
from apps.core.models import BackfillProgress

logger = logging.getLogger(__name__)

BACKFILL_ROWS = Counter("openwop_backfill_rows_total", "Rows changed by post-deploy backfills.", ["backfill"])

Step = Callable[[Any, str | None, int], tuple[str | None, int]]


@dataclass(frozen=True, slots=True)
class Backfill:
    name: str  # "<app>.<what>": stable, the key of its progress row and its metric label
    description: str
    step: Step


@dataclass(slots=True)
class BackfillReport:
    name: str
    rows: int = 0  # changed by this call
    batches: int = 0
    lock_retries: int = 0
    done: bool = False
    busy: bool = False  # another runner holds it

    def line(self) -> str:
        state = "done" if self.done else "busy elsewhere" if self.busy else "pending"
        return f"{self.name}: {state}, {self.rows} rows in {self.batches} batches ({self.lock_retries} lock retries)"


_registry: dict[str, Backfill] = {}


def backfill_register(backfill: Backfill) -> None:
    existing = _registry.get(backfill.name)
    if existing is not None and existing != backfill:
        raise ValueError(f"a backfill named {backfill.name!r} is already registered")
    _registry[backfill.name] = backfill


def backfill_unregister(name: str) -> None:
    _registry.pop(name, None)


def backfills_registered() -> list[Backfill]:
    return [_registry[name] for name in sorted(_registry)]


def backfill_progress(*, name: str) -> BackfillProgress | None:
    return BackfillProgress.objects.filter(name=name).first()


def backfills_pending() -> list[Backfill]:
    done = set(BackfillProgress.objects.filter(done_at__isnull=False).values_list("name", flat=True))
    return [backfill for backfill in backfills_registered() if backfill.name not in done]


def backfill_run(
    *,
    name: str,
    batch_size: int | None = None,
    seconds: float | None = None,
    duty: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BackfillReport:
    """Run backfill `name` until it is done (or for about `seconds`, batches never cut short)."""
    backfill = _registry[name]
    size = batch_size or settings.OPENWOP_BACKFILL_BATCH
    share = duty if duty is not None else settings.OPENWOP_BACKFILL_DUTY
    report = BackfillReport(name=name)
    started = time.monotonic()
    BackfillProgress.objects.get_or_create(name=name)
    while seconds is None or time.monotonic() - started < seconds:
        batch_started = time.monotonic()
        try:
            outcome = _batch(backfill, size)
        except OperationalError as error:
            if not is_lock_timeout(error):
                raise
            report.lock_retries += 1
            logger.warning("backfill %s: a batch could not take its locks; trying again", name)
            sleep(min(2**report.lock_retries, 30))
            continue
        if outcome is None:
            report.busy = True
            break
        rows, progress = outcome
        report.rows += rows
        report.batches += 1
        BACKFILL_ROWS.labels(name).inc(rows)
        if progress.done_at is not None:
            report.done = True
            logger.info("backfill %s: done, %d rows in %d batches", name, progress.rows, progress.batches)
            break
        took = time.monotonic() - batch_started
        logger.info(
            "backfill %s: %d rows so far (%d batches), next after %r; the batch took %.0f ms",
            name, progress.rows, progress.batches, progress.position, took * 1000,
        )  # fmt: skip
        sleep(took * (1 / share - 1))
    return report


def _batch(backfill: Backfill, size: int) -> tuple[int, BackfillProgress] | None:
    """One batch and its progress row in one transaction; None when another runner holds the row."""
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{settings.OPENWOP_MIGRATE_LOCK_TIMEOUT}s"])
        progress = BackfillProgress.objects.select_for_update(skip_locked=True).filter(name=backfill.name).first()
        if progress is None:
            return None
        if progress.done_at is not None:
            return 0, progress
        with connection.cursor() as cursor:
            position, rows = backfill.step(cursor, progress.position or None, size)
        now = timezone.now()
        progress.position = position or ""
        progress.rows += rows
        progress.batches += 1
        progress.started_at = progress.started_at or now
        progress.updated_at = now
        progress.done_at = now if position is None else None
        progress.save()
        return rows, progress


def backfills_run_pending(*, seconds: float) -> list[BackfillReport]:
    """The beat job: each pending backfill in turn, for about `seconds` in all."""
    deadline = time.monotonic() + seconds
    reports = []
    for backfill in backfills_pending():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        reports.append(backfill_run(name=backfill.name, seconds=left))
    return reports


def backfill_gauges() -> Iterable[GaugeMetricFamily]:
    """Scrape-time readings of the progress table (tiny: one row per backfill)."""
    pending = GaugeMetricFamily(
        "openwop_backfill_pending", "1 while a registered post-deploy backfill has not finished.", labels=["backfill"]
    )
    rows = GaugeMetricFamily(
        "openwop_backfill_rows_done", "Rows a post-deploy backfill has changed so far.", labels=["backfill"]
    )
    progress = {p.name: p for p in BackfillProgress.objects.all()}
    for backfill in backfills_registered():
        row = progress.get(backfill.name)
        pending.add_metric([backfill.name], 0 if row is not None and row.done_at is not None else 1)
        rows.add_metric([backfill.name], row.rows if row is not None else 0)
    yield pending
    yield rows
