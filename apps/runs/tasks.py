"""Celery tasks of the run executor. Thin: ids in, an engine call out (STYLE.md habit 8).

A worker process also keeps a clock for the runs its threads parked, and sweeps on it
(docs/contributors/run-executor.md): both live in one maintenance thread, started when the worker
is ready.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from datetime import datetime

from celery import shared_task
from celery.signals import worker_ready
from celery.worker import state as worker_state
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from apps.runs.engine import heartbeat_seconds, run_sweep_stale, runs_work
from apps.runs.idempotency import idempotency_records_purge

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="runs.advance", acks_late=True, ignore_result=True)
def advance(self, run_id: str) -> None:
    """A wake-up: this thread claims runs fairly from PostgreSQL and advances them (engine.runs_work).
    `run_id` names what prompted it (the previous release's workers advance that run); the claim
    takes whatever is fairest. acks_late: a delivery its worker died in is redelivered, one more
    wake-up. With its budget spent and runs still claimable, it passes the turn on."""
    # The lease owner names this worker process and this delivery of the task.
    worker = f"{self.request.hostname}:{os.getpid()}:{self.request.id}"
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    worked = runs_work(worker=worker, queue=queue, on_park=_clock.wake_at)
    if worked.more and worked.last is not None:
        wake_send(run_id=worked.last, queue=queue)


def wake_send(*, run_id: str, queue: str) -> bool:
    """Send one `runs.advance` naming `run_id` (what prompted it; the previous release's workers
    advance that run) to `queue`; False, logged, when the broker refused it. The one place the
    executor's message goes out (services.advance_send records a refusal on the run)."""
    try:
        advance.apply_async(args=[run_id], queue=queue)
    except Exception as exc:  # kombu's and the transport's errors alike
        # The class name only: a broker error's text may carry its URL, and so its password.
        logger.warning("run %s: runs.advance not sent (%s); the sweeper re-sends it", run_id, type(exc).__name__)
        return False
    return True


@shared_task(bind=True, name="runs.sweep_stale", ignore_result=True)
def sweep_stale(self) -> None:
    run_sweep_stale(capacity=idle_threads())
    idempotency_records_purge()


# The worker's pool size, read when it is ready (0 outside a worker: nothing idle to wake).
_pool_threads = 0


def idle_threads() -> int:
    """Threads of this worker's pool with no task, reserved or running: what the sweeper may wake."""
    return max(0, _pool_threads - len(worker_state.reserved_requests))


class _Clock:
    """The wake-up times of the runs this process parked: at each, one wake-up goes out, so a
    parked run is claimed when due without any thread waiting for it. In memory only: a run
    parked by a process that died is woken by a sweeper instead, a claim window late."""

    def __init__(self) -> None:
        self._due: list[tuple[datetime, str, str]] = []
        self._changed = threading.Condition()
        self.served_in = 0  # the process whose thread sends this clock's wake-ups

    def wake_at(self, run_id: str, queue: str, until: datetime) -> None:
        with self._changed:
            heapq.heappush(self._due, (until, run_id, queue))
            self._changed.notify()
            if self.served_in != os.getpid():
                # No thread of this process serves the clock: a pool process forked after the worker
                # was ready (a prefork pool), or a task that ran before: serve it from here.
                self.served_in = os.getpid()
                threading.Thread(target=_wake_forever, name="runs-clock", daemon=True).start()

    def wait(self, seconds: float) -> list[tuple[str, str]]:
        """Wait at most `seconds`, less when a wake-up falls due first; the (run, queue) pairs due."""
        with self._changed:
            if not self._due_now():
                until = self._due[0][0] if self._due else None
                left = seconds if until is None else min(seconds, (until - timezone.now()).total_seconds())
                if left > 0:
                    self._changed.wait(left)
            return self._due_now()

    def _due_now(self) -> list[tuple[str, str]]:
        now, due = timezone.now(), []
        while self._due and self._due[0][0] <= now:
            _, run_id, queue = heapq.heappop(self._due)
            due.append((run_id, queue))
        return due


_clock = _Clock()


def _wake_forever() -> None:
    while True:
        for run_id, queue in _clock.wait(60.0):
            wake_send(run_id=run_id, queue=queue)


def _sweep_forever(stop: threading.Event) -> None:
    """Every worker sweeps on its own clock, so a killed worker's runs resume with no beat running.
    Sweeps are conditional updates: several workers sweeping at once send one message per run.
    Between sweeps it sends the wake-ups of the runs this process parked, each when it falls due."""
    _clock.served_in = os.getpid()
    next_sweep = time.monotonic() + heartbeat_seconds()
    while not stop.is_set():
        for run_id, queue in _clock.wait(max(0.0, next_sweep - time.monotonic())):
            wake_send(run_id=run_id, queue=queue)  # a refused one: the sweeper wakes the run later
        if time.monotonic() < next_sweep:
            continue
        next_sweep = time.monotonic() + heartbeat_seconds()
        try:
            close_old_connections()
            run_sweep_stale(capacity=idle_threads())
        except Exception:
            logger.exception("run sweeper failed; retrying on the next tick")
        finally:
            connection.close()


_sweeper_stop = threading.Event()


@worker_ready.connect
def _start_sweeper(sender: object = None, **kwargs: object) -> None:
    # Worker lifecycle, not domain behaviour: the signal only starts the maintenance loop.
    global _pool_threads
    _pool_threads = int(getattr(getattr(sender, "pool", None), "limit", None) or 0)
    sweep_stale.delay()
    threading.Thread(target=_sweep_forever, args=(_sweeper_stop,), name="runs-sweeper", daemon=True).start()
