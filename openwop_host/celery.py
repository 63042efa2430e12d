"""The Celery app. Tasks are thin: ids in, a service call out (STYLE.md habit 8)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

app = Celery("openwop_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Their signal handlers: readiness sees live workers; tasks' log scopes and beat jobs' last outcomes.
from openwop_host import task_signals, worker_heartbeat  # noqa: E402, F401


@worker_init.connect
def _tracing(**_: object) -> None:
    """OpenTelemetry in the worker when OTEL_EXPORTER_OTLP_ENDPOINT is set (apps/core/tracing.py)."""
    from apps.core.tracing import configure

    configure("worker")


@worker_ready.connect
def _metrics_port(**_: object) -> None:
    """OPENWOP_METRICS_PORT: this worker's own counters (runs, pushes) on a port of its own, for a
    scraper of its pod (the Helm chart's ServiceMonitor); a worker has no web server to ask."""
    from django.conf import settings

    if settings.OPENWOP_METRICS_PORT:
        from apps.core.metrics import metrics_serve

        metrics_serve(settings.OPENWOP_METRICS_PORT)
