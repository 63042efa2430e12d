"""Celery tasks of the run executor. Thin: ids in, an engine call out (STYLE.md habit 8)."""

from __future__ import annotations

import logging
import os
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.db import close_old_connections, connection

from apps.runs.engine import heartbeat_seconds, run_advance, run_sweep_stale
from apps.runs.idempotency import idempotency_records_purge

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="runs.advance", acks_late=True, ignore_result=True)
def advance(self, run_id: str) -> None:
    # The lease owner names this worker process and this delivery of the task.
    run_advance(run_id=run_id, worker=f"{self.request.hostname}:{os.getpid()}:{self.request.id}")


@shared_task(bind=True, name="runs.sweep_stale", ignore_result=True)
def sweep_stale(self) -> None:
    run_sweep_stale()
    idempotency_records_purge()


def _sweep_forever(stop: threading.Event) -> None:
    """Every worker sweeps on its own clock, so a killed worker's runs resume with no beat running.
    Sweeps are conditional updates: several workers sweeping at once send one message per run."""
    while not stop.wait(heartbeat_seconds()):
        try:
            close_old_connections()
            run_sweep_stale()
        except Exception:
            logger.exception("run sweeper failed; retrying on the next tick")
        finally:
            connection.close()


_sweeper_stop = threading.Event()


@worker_ready.connect
def _start_sweeper(**kwargs: object) -> None:
    # Worker lifecycle, not domain behaviour: the signal only starts the maintenance loop.
    sweep_stale.delay()
    threading.Thread(target=_sweep_forever, args=(_sweeper_stop,), name="runs-sweeper", daemon=True).start()
