"""A Celery worker's heartbeat (apps/core/heartbeats.py), driven by the worker's own signals.

`worker_ready` (the consumer is up and consuming) starts a daemon thread that writes this process's
row at once and then every OPENWOP_WORKER_HEARTBEAT_SECONDS; `worker_shutdown` stops it and removes
the row. A beat that fails (the database restarting) is logged by its class only and tried again
on the next period: the worker keeps working meanwhile, and readiness notices only if it lasts.
Registered by importing this module from openwop_host/celery.py.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown

logger = logging.getLogger(__name__)

_state: dict[str, Any] = {}


def _queues(consumer: Any) -> list[str]:
    try:
        return sorted(str(name) for name in consumer.app.amqp.queues.consume_from)
    except AttributeError:  # a consumer without the usual app (never under `celery worker`)
        return []


def _beat_forever(worker: str, queues: list[str], period: float, stop: threading.Event) -> None:
    from django.db import connection

    from apps.core.heartbeats import worker_heartbeat_beat, worker_heartbeats_prune

    first = True
    while not stop.is_set():
        try:
            worker_heartbeat_beat(worker=worker, queues=queues)
            if first:
                worker_heartbeats_prune()
                first = False
        except Exception as exc:  # the database is away: try again next period
            logger.warning("worker heartbeat not written (%s); retrying in %.0f s", type(exc).__name__, period)
        finally:
            connection.close()  # this thread's own connection; a broken one must not be reused
        stop.wait(period)


@worker_ready.connect
def _start(sender: Any = None, **_: object) -> None:
    from apps.core.heartbeats import heartbeat_period_seconds

    period = heartbeat_period_seconds()
    if period <= 0 or "thread" in _state:
        return
    worker = f"{getattr(sender, 'hostname', None) or 'celery'}/{os.getpid()}"
    stop = threading.Event()
    thread = threading.Thread(
        target=_beat_forever, args=(worker, _queues(sender), period, stop), name="worker-heartbeat", daemon=True
    )
    _state.update(worker=worker, stop=stop, thread=thread)
    thread.start()


@worker_shutdown.connect
def _stop(**_: object) -> None:
    stop, thread, worker = _state.get("stop"), _state.get("thread"), _state.get("worker")
    if stop is None or thread is None or not isinstance(worker, str):
        return
    stop.set()
    thread.join(timeout=5)

    from django.db import connection

    from apps.core.heartbeats import worker_heartbeat_forget

    try:
        worker_heartbeat_forget(worker=worker)
    except Exception as exc:
        logger.warning("worker heartbeat not removed (%s); it ages out", type(exc).__name__)
    finally:
        connection.close()
