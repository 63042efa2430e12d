"""Push with two workers: every event delivered to a loopback receiver, each with one dedup identity
(OpenWOP-Webhook-Id, runId, sequence; webhooks.md), none lost when the worker holding a delivery in
flight is SIGKILLed (the sweeper of the surviving worker re-sends it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import psutil
from openwop_client import OpenwopClient
from openwop_client.types import CreateRunRequest

from tests.cluster.clients import wait_until
from tests.cluster.conftest import new_key, unique

EVENTS = ["run.started", "node.started", "node.completed", "run.completed"]
SLOW_SECONDS = 1.5  # below OPENWOP_PUSH_ATTEMPT_TIMEOUT (4): a delivery is in flight this long


@dataclass
class SlowReceiver:
    port: int = 0
    received: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def slow_receiver() -> Iterator[SlowReceiver]:
    state = SlowReceiver()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state.lock:
                state.in_flight += 1
            try:
                time.sleep(SLOW_SECONDS)
                with state.lock:
                    state.received.append((dict(self.headers.items()), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            finally:
                with state.lock:
                    state.in_flight -= 1

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _worker_sending_to(cluster: Any, port: int) -> str | None:
    """The worker process with an open connection to the receiver's port (its delivery in flight)."""
    for name in ("worker1", "worker2"):
        proc = cluster.procs[name]
        if not proc.alive():
            continue
        for conn in psutil.Process(proc.pid).net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED:
                return name
    return None


def test_push_with_two_workers_survives_a_worker_killed_mid_delivery(cluster: Any) -> None:
    key = new_key(cluster, unique("push"))
    client = OpenwopClient(base_url=cluster.lb, api_key=key, timeout=30)
    killed = None
    with slow_receiver() as receiver:
        registered = httpx.post(
            f"{cluster.lb}/webhooks", headers={"Authorization": f"Bearer {key}"}, timeout=10,
            json={"url": f"http://127.0.0.1:{receiver.port}/hook", "events": EVENTS},
        )  # fmt: skip
        assert registered.status_code == 201, registered.text
        webhook_id = registered.json()["webhookId"]
        run_ids = [client.runs_create(CreateRunRequest(workflowId="echo", inputs={"n": i})).runId for i in range(3)]
        try:
            killed = wait_until(lambda: _worker_sending_to(cluster, receiver.port), "a delivery in flight", 30)
            cluster.procs[killed].stop(kill=True)
            expected = {(run_id, seq) for run_id in run_ids for seq in range(1, 5)}

            def identities() -> set[tuple[str, int]]:
                with receiver.lock:
                    return {(body["runId"], body["event"]["sequence"]) for _, body in receiver.received}

            wait_until(lambda: identities() >= expected, "every event delivered", timeout=90)
        finally:
            if killed is not None:
                cluster.start_proc(killed)
    with receiver.lock:
        received = list(receiver.received)
    assert {h["OpenWOP-Webhook-Id"] for h, _ in received} == {webhook_id}
    by_identity: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for headers, body in received:
        by_identity.setdefault((body["runId"], body["event"]["sequence"]), []).append(body)
        assert headers["OpenWOP-Event-Type"] == body["event"]["type"]
    assert set(by_identity) == expected
    # The delivery in flight at the kill reached the receiver and was sent again by the surviving
    # worker once its claim lapsed: at least one event arrived twice, under the same identity.
    assert len(received) > len(expected), len(received)
    # At-least-once: a copy re-sent after the kill is the same event, byte for byte in meaning.
    for copies in by_identity.values():
        assert all(copy == copies[0] for copy in copies)
    for run_id in run_ids:
        assert [by_identity[(run_id, s)][0]["event"]["type"] for s in range(1, 5)] == EVENTS
