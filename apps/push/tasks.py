"""Celery tasks of push delivery. Thin: a delivery pk in, an engine call out (STYLE.md habit 8)."""

from __future__ import annotations

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.db import close_old_connections, connection

from apps.push.capabilities import push_setting
from apps.push.engine import dead_letters_purge, deliveries_sweep, delivery_dispatch

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="push.deliver", acks_late=True, ignore_result=True)
def deliver(self, delivery_pk: int) -> None:
    # Returns once claimed: the send runs on a sender thread (lanes.py), never on this slot.
    delivery_dispatch(delivery_pk=delivery_pk)


@shared_task(bind=True, name="push.sweep", ignore_result=True)
def sweep(self) -> None:
    deliveries_sweep()
    dead_letters_purge()


def _sweep_forever(stop: threading.Event) -> None:
    """Every worker sweeps on its own clock, so a lost message is re-sent with no beat running."""
    interval = push_setting("OPENWOP_PUSH_SWEEP_SECONDS")
    while not stop.wait(interval):
        try:
            close_old_connections()
            deliveries_sweep()
        except Exception:
            logger.exception("push sweeper failed; retrying on the next tick")
        finally:
            connection.close()


_sweeper_stop = threading.Event()


@worker_ready.connect
def _start_sweeper(**kwargs: object) -> None:
    # Worker lifecycle, not domain behaviour: the signal only starts the maintenance loop.
    sweep.delay()
    threading.Thread(target=_sweep_forever, args=(_sweeper_stop,), name="push-sweeper", daemon=True).start()
