"""One /metrics scrape through the balancer counts every process of the cluster (issue 51 item 3):
every process writes its samples to the cluster's PROMETHEUS_MULTIPROC_DIR, so a scrape that
reaches either web replica sees what the gRPC servers answered and what the workers ran, beside
what the web process reads when scraped (beat jobs' last success, queue depth, the default
partition's records, retention's and the chain's last passes).

The balancer lets /metrics through only to OPENWOP_METRICS_ALLOW_CIDRS (none in the session's
cluster: tests/cluster/test_forwarded_headers.py); this test restarts the balancer with a
scraper's network allowed, as an operator configures it, and puts it back after."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from a2a.types import GetTaskRequest, TaskState
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from tests.cluster.clients import Clients, card_at, wait_until
from tests.cluster.conftest import cluster_lib, new_key
from tests.metrics_samples import Samples, samples_of

# The scraper's address: a loopback address of its own (Linux routes all of 127/8 to lo), in the
# replicas' default allowlist (loopback) and in the balancer's once it is restarted with it.
SCRAPER = "127.93.0.7"


@contextlib.contextmanager
def _balancer_lets_metrics_through(cluster: Any, network: str) -> Iterator[None]:
    config = cluster.dir / "haproxy.cfg"
    original = config.read_text()
    lb, grpc_lb = urlsplit(cluster.lb), cluster.grpc_lb
    config.write_text(
        cluster_lib._haproxy_config(
            host=lb.hostname, lb_port=lb.port, grpc_lb_port=int(grpc_lb.rpartition(":")[2]), web=cluster.web,
            grpc=cluster.grpc, dir=cluster.dir, source=cluster.balancer_source, metrics_allowed=[network],
        )
    )  # fmt: skip
    try:
        cluster.procs["haproxy"].stop()
        cluster.start_proc("haproxy")
        yield
    finally:
        config.write_text(original)
        cluster.procs["haproxy"].stop()
        cluster.start_proc("haproxy")


def _scrape(cluster: Any) -> Samples:
    """GET /metrics through the balancer from the scraper's address."""
    parts = urlsplit(cluster.lb)
    assert parts.hostname and parts.port
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(SCRAPER, 0))
    try:
        connection.request("GET", "/metrics", headers={"Host": "127.0.0.1"})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    assert response.status == 200, body[:300]
    return samples_of(body.decode())


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return (_value(after, name, **labels) or 0.0) - (_value(before, name, **labels) or 0.0)


def test_one_scrape_through_the_balancer_covers_every_process(cluster: Any) -> None:
    key = new_key(cluster)
    with _balancer_lets_metrics_through(cluster, f"{SCRAPER}/32"):
        before = _scrape(cluster)
        # A run a worker executes (its delay node is a worker's), created through the balancer ...
        rest = OpenwopClient(base_url=cluster.lb, api_key=key, timeout=30)
        run_id = rest.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 300})).runId

        # ... and watched over gRPC until it completes: each GetTask answered by a gRPC server process.
        async def watch() -> int:
            clients = Clients(key)
            try:
                client = clients.grpc(card_at(cluster.lb))
                for polls in range(1, 601):
                    task = await client.get_task(GetTaskRequest(id=run_id))
                    if task.status.state == TaskState.TASK_STATE_COMPLETED:
                        return polls
                    await asyncio.sleep(0.1)
                raise AssertionError("the run did not complete")
            finally:
                await clients.close()

        polls = asyncio.run(watch())

        # runs.sweep_stale runs every 30 s: once beat sent it and a worker ran it, every replica says so.
        def swept() -> Samples | None:
            samples = _scrape(cluster)
            ran = _value(samples, "openwop_beat_job_last_success_timestamp_seconds", job="runs.sweep_stale")
            return samples if ran else None

        first = wait_until(swept, "a beat job's success in the scrape", timeout=90)
        second = _scrape(cluster)  # round robin: the other replica
        for after in (first, second):
            # What the gRPC servers answered and the worker finished, in one scrape of a web replica.
            grpc_ok = {"door": "a2a-grpc", "operation": "GetTask", "outcome": "ok"}
            assert _moved(before, after, "openwop_requests_total", **grpc_ok) == polls
            assert _moved(before, after, "openwop_runs_finished_total", status="completed", transport="rest") == 1
            # Read at scrape time from PostgreSQL and the broker: the same on every replica.
            queue = cluster.env["OPENWOP_CELERY_QUEUE"]
            for name in (queue, f"{queue}-push"):
                assert _value(after, "openwop_celery_queue_length", queue=name) is not None, name
            assert _value(after, "openwop_records_default_partition_rows") == 0
            for name in (
                "openwop_retention_last_pass_timestamp_seconds", "openwop_retention_last_pass_runs_expired",
                "openwop_audit_chainer_last_pass_timestamp_seconds", "openwop_audit_verify_last_pass_broken_streams",
            ):  # fmt: skip
                assert _value(after, name) is not None, name
            assert _value(after, "openwop_beat_job_last_success_timestamp_seconds", job="retention.apply") is not None
