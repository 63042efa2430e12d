"""OpenTelemetry traces, exported over OTLP/HTTP when the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and nothing at all
when it is not: `configure` then returns before importing the SDK, and `span()` hands back one
shared no-op context manager (a global read per call).

What is traced, each joined to the run's trace context (`Run.traceparent`: the `traceparent` that
arrived in A2A message metadata, MCP `_meta` or the REST header, else one the host minted):
- every door request (A2A, MCP, a run's event stream), parented on the request's `traceparent`
  header when it has one; Django's own requests through the Django instrumentation;
- the creation of a run in the web process (`openwop.run.create`, in the run's trace);
- each advance of a run on a worker and each node step in it (`openwop.run.advance`,
  `openwop.run.step`, in the run's trace);
- each push attempt (`openwop.push.attempt`); outbound HTTP (push, webhooks, peer calls) through
  the httpx instrumentation, under whatever span is current (a peer call inside a run's step);
- SQL through the psycopg instrumentation, Celery tasks through the Celery instrumentation.

The standard `OTEL_*` variables configure the exporter and the batch processor (endpoint, headers,
`OTEL_SERVICE_NAME`, `OTEL_BSP_SCHEDULE_DELAY`, ...). Span attributes never carry a tenant's data,
a key or a token: ids, names and outcomes only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

_tracer: Any = None
_NOOP = contextlib.nullcontext()


def tracing_wanted() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(role: str) -> bool:
    """Install the tracer provider and the instrumentations in this process (`role`: web or
    worker), once; False (and nothing imported) when no OTLP endpoint is configured."""
    global _tracer
    if _tracer is not None or not tracing_wanted():
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({
        "service.name": os.environ.get("OTEL_SERVICE_NAME", "openwop-host"),
        "openwop.process": role,
        "process.pid": os.getpid(),
    })  # fmt: skip
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    if role == "worker":
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()
    else:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument()
    PsycopgInstrumentor().instrument(enable_commenter=False)
    HTTPXClientInstrumentor().instrument(request_hook=_outbound_url_sanitized)
    _tracer = trace.get_tracer("openwop-host")
    return True


def enabled() -> bool:
    return _tracer is not None


def span(name: str, *, traceparent: str | None = None, attributes: dict[str, Any] | None = None) -> Any:
    """A span named `name` (a no-op when tracing is off), child of `traceparent` when given (the
    run's trace), else of the current span."""
    if _tracer is None:
        return _NOOP
    return _span(name, traceparent, attributes)


@contextlib.contextmanager
def _span(name: str, traceparent: str | None, attributes: dict[str, Any] | None) -> Iterator[Any]:
    context = None
    if traceparent:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    with _tracer.start_as_current_span(name, context=context, attributes=attributes) as current:
        yield current


def _outbound_url_sanitized(span: Any, request: Any) -> None:
    """An outbound URL as our logs write it (apps.core.egress.sanitize_url: no userinfo, no query):
    a push or peer URL can carry a credential."""
    from apps.core.egress import sanitize_url

    if span is not None and span.is_recording():
        span.set_attribute("url.full", sanitize_url(str(request.url)))
