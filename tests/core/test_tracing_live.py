"""OpenTelemetry traces (apps/core/tracing.py, issue 22) into a real OTLP/HTTP receiver on loopback.

A live host (uvicorn + a Celery worker of its own, both with `OTEL_EXPORTER_OTLP_ENDPOINT` set)
takes an A2A SendMessage from the a2a-sdk client whose message metadata carries a `traceparent`;
the run goes to the worker (`returnImmediately`). The receiver decodes every export request
(protobuf, as the SDK's exporter sends it) and must see, in that one trace, the web process's run
creation and the worker's advance and step spans, each process naming itself in its resource. The
door's span for a request with a `traceparent` header joins that header's trace. And nothing is
exported by a process started without the endpoint (the rest of the suite: tracing is off).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageConfiguration, SendMessageRequest, TaskState
from google.protobuf.struct_pb2 import Struct
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from apps.agents.services import workflow_fixtures_seed
from apps.core import tracing
from apps.tenants.models import Tenant
from tests.a2a.live import Session, live_card
from tests.live import start_celery_worker, start_web

Span = tuple[str, str, str, str]  # (trace id, span id, name, the process that sent it)


class _Receiver(ThreadingHTTPServer):
    spans: list[Span]


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource_spans in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.server.spans.append(
                        (span.trace_id.hex(), span.span_id.hex(), span.name, attributes.get("openwop.process", ""))
                    )
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Any:
    server = _Receiver(("127.0.0.1", 0), _Handler)
    server.spans = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _wait_for(predicate: Any, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_traceparent_in_a2a_metadata_joins_web_and_worker_spans(live_env: Any, receiver: Any, make_key: Any) -> None:
    env, var_dir = live_env
    queue = f"{env['OPENWOP_CELERY_QUEUE']}-otel"
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    own = {**env, "OPENWOP_CELERY_QUEUE": queue, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "openwop-host-test"}  # fmt: skip
    web, base_url = start_web(own, var_dir)
    worker = start_celery_worker(own, var_dir, name="otel")
    try:
        key = make_key("acme")
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
        trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)

        async def send() -> TaskState:
            session = Session(await live_card(base_url), "JSONRPC", key)
            try:
                client = session.client()
                metadata = Struct()
                metadata.update({"openwop": {"skillId": "echo", "traceparent": f"00-{trace_id}-{parent_id}-01"}})
                message = Message(role=Role.ROLE_USER, message_id=f"otel-{uuid.uuid4()}", parts=[Part(text="hi")])
                message.metadata.CopyFrom(metadata)
                request = SendMessageRequest(message=message)
                request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
                [event] = [event async for event in client.send_message(request)]
                for _ in range(300):
                    task = await client.get_task(GetTaskRequest(id=event.task.id))
                    if task.status.state == TaskState.TASK_STATE_COMPLETED:
                        return task.status.state
                    await asyncio.sleep(0.1)
                return task.status.state
            finally:
                await session.close()

        assert asyncio.run(send()) == TaskState.TASK_STATE_COMPLETED

        def in_trace() -> set[tuple[str, str]]:
            return {(name, process) for tid, _, name, process in receiver.spans if tid == trace_id}

        wanted = {("openwop.run.create", "web"), ("openwop.run.advance", "worker"), ("openwop.run.step", "worker")}
        assert _wait_for(lambda: wanted <= in_trace()), (in_trace(), len(receiver.spans))

        # A door request with a traceparent header: its span joins that trace.
        header_trace = secrets.token_hex(16)
        httpx.get(f"{base_url}/.well-known/agent-card.json",
                  headers={"traceparent": f"00-{header_trace}-{secrets.token_hex(8)}-01"}, timeout=10)  # fmt: skip
        assert _wait_for(
            lambda: any(tid == header_trace and name == "a2a GetAgentCard" for tid, _, name, _ in receiver.spans)
        ), sorted({name for _, _, name, _ in receiver.spans})
        # No credential in any exported span name.
        assert not any(key in name for _, _, name, _ in receiver.spans)
    finally:
        worker.stop()
        web.stop()


def test_this_process_traces_nothing_without_an_endpoint() -> None:
    """The suite's own processes run without OTEL_EXPORTER_OTLP_ENDPOINT: no provider installed,
    and a span is the shared no-op (what the bench measures as "off")."""
    assert not tracing.tracing_wanted() and not tracing.enabled()
    with tracing.span("openwop.test", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01") as current:
        assert current is None
