"""OPENWOP_METRICS_PORT (issue 51 item 3): a Celery worker and a gRPC server, which have no web
server of their own, serve GET /metrics on a port of their own, so a scraper of their pods (the
Helm chart's ServiceMonitor) sees the runs a worker finished and the RPCs a gRPC server answered;
to the allowed networks only, with the unknown path's 404 for anyone else and any other path."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import ListTasksRequest, a2a_pb2_grpc
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from apps.agents.services import workflow_fixtures_seed
from apps.runs.models import Run
from apps.tenants.models import Tenant
from tests.live import free_port, start_celery_worker, start_grpc, start_web, wait_until
from tests.metrics_samples import Samples, samples_of

pytestmark = pytest.mark.django_db(transaction=True)


def _scrape(port: int) -> Samples | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.HTTPError:
        return None  # not listening yet
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("text/plain")
    return samples_of(response.text)


def _completed(run_id: str) -> bool:
    return Run.unscoped_all_tenants.filter(run_id=run_id, status="completed").exists()


def test_a_worker_and_a_grpc_server_serve_their_own_metrics(live_env: Any, make_key: Any) -> None:
    env, var_dir = live_env
    env = {**env, "OPENWOP_CELERY_QUEUE": f"openwop-procmetrics-{uuid.uuid4().hex[:8]}"}  # its own worker only
    worker_port, grpc_port = free_port(), free_port()
    web, base_url = start_web(env, var_dir)
    worker = start_celery_worker({**env, "OPENWOP_METRICS_PORT": str(worker_port)}, var_dir, name="metrics")
    grpc_server, address = start_grpc({**env, "OPENWOP_METRICS_PORT": str(grpc_port)}, var_dir)
    try:
        key = make_key("acme")
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
        wait_until(lambda: _scrape(worker_port), "the worker's metrics port")
        # A run the worker executes (a delay node is a worker's), created through the web process.
        rest = OpenwopClient(base_url=base_url, api_key=key, timeout=30)
        run_id = rest.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 50})).runId
        wait_until(lambda: _completed(run_id), "the worker to finish the run")
        finished = ("openwop_runs_finished_total", (("status", "completed"), ("transport", "rest")))

        def counted() -> Samples | None:
            samples = _scrape(worker_port)
            return samples if samples is not None and finished in samples else None

        samples = wait_until(counted, "the finished run in the worker's scrape")
        assert samples[finished] == 1  # the worker's own count

        async def list_tasks() -> None:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                metadata = (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))
                await stub.ListTasks(ListTasksRequest(), metadata=metadata)

        asyncio.run(list_tasks())
        served = _scrape(grpc_port)
        assert served is not None
        listed = (("door", "a2a-grpc"), ("operation", "ListTasks"), ("outcome", "ok"))
        assert served[("openwop_requests_total", listed)] == 1

        # Any other path, and /metrics to an address outside the allowed networks: the 404.
        other = httpx.get(f"http://127.0.0.1:{worker_port}/admin", timeout=5)
        assert other.status_code == 404 and b"openwop_" not in other.content
    finally:
        for process in (grpc_server, worker, web):
            process.stop()


def test_the_port_refuses_an_address_outside_the_allowed_networks(live_env: Any) -> None:
    env, var_dir = live_env
    port = free_port()
    grpc_server, _ = start_grpc({**env, "OPENWOP_METRICS_PORT": str(port), "OPENWOP_METRICS_ALLOW_CIDRS": "10.0.0.0/8"},
                                var_dir)  # fmt: skip
    try:
        refused = wait_until(lambda: _get_or_none(port), "the gRPC server's metrics port")
        assert refused.status_code == 404 and b"openwop_" not in refused.content
    finally:
        grpc_server.stop()


def _get_or_none(port: int) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.HTTPError:
        return None
