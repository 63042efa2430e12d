"""ASGI entry point: a Channels ProtocolTypeRouter.

HTTP for the protocol doors (the A2A interfaces, the MCP mount, the public agent card) is served
by apps/doors straight from ASGI; everything else (REST, SSE, admin, console) by Django.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
django_asgi_app = get_asgi_application()

from apps.core.tracing import configure as tracing_configure  # noqa: E402

tracing_configure("web")  # OpenTelemetry only when OTEL_EXPORTER_OTLP_ENDPOINT is set

from channels.routing import ProtocolTypeRouter  # noqa: E402 - Django must be set up first
from django.conf import settings  # noqa: E402

from apps.core.read_deadline import body_read_deadline  # noqa: E402
from apps.doors.asgi import doors_application  # noqa: E402
from openwop_host import gc_policy  # noqa: E402
from openwop_host.loopback_only import loopback_only  # noqa: E402

# Every HTTP request's body is due within OPENWOP_BODY_READ_TIMEOUT_SECONDS (apps/core/read_deadline.py).
_http = body_read_deadline(doors_application(django_asgi_app))
# A development host (DEBUG) answers loopback callers only (issue 33 item 7; loopback_only.py).
application = ProtocolTypeRouter({"http": loopback_only(_http) if settings.DEBUG else _http})

# Everything imported and built so far lives as long as the process: out of the collector's sight
# (`gc.freeze`), a full collection walks only what requests left behind. Without it each full
# collection walked every module's objects and stopped the event loop for 100-200 ms under MCP
# load, the whole of tools/call's p99 (a gc.callbacks probe on the bench host, session 13). What
# survives a full collection later (open streams' connections) is frozen too: gc_policy.py.
gc_policy.install()
