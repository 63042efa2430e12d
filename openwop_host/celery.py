"""The Celery app. Tasks are thin: ids in, a service call out (STYLE.md habit 8)."""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

app = Celery("openwop_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Their signal handlers: readiness sees live workers; tasks' log scopes and beat jobs' last outcomes.
from openwop_host import task_signals, worker_heartbeat  # noqa: E402, F401


@after_setup_logger.connect
def _text_logs_with_context(logger: logging.Logger, format: str, **_: object) -> None:
    """Text logs (OPENWOP_LOG_FORMAT=text; Celery then installs handlers of its own): each worker
    line keeps Celery's format and gains its record's context (tenant, operation, ids) and the
    redaction the web processes' lines have (apps/core/logformat.py). A handler the host's LOGGING
    made (JSON logs keep them: CELERY_WORKER_HIJACK_ROOT_LOGGER) keeps its formatter."""
    from apps.core.logformat import JsonFormatter, RedactingFormatter

    for handler in logger.handlers:
        if not isinstance(handler.formatter, JsonFormatter | RedactingFormatter):
            handler.setFormatter(RedactingFormatter(format))


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
