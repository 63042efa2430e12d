"""The Celery app. Tasks are thin: ids in, a service call out (STYLE.md habit 8)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

app = Celery("openwop_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from openwop_host import worker_heartbeat  # noqa: E402, F401 - its signal handlers: readiness sees live workers


@worker_init.connect
def _tracing(**_: object) -> None:
    """OpenTelemetry in the worker when OTEL_EXPORTER_OTLP_ENDPOINT is set (apps/core/tracing.py)."""
    from apps.core.tracing import configure

    configure("worker")
