"""Bench: does one healthy webhook receiver keep its delivery delay while 8 receivers hang?

webhooks.md §Durability (invariant webhook-delivery-isolation, RFC 0215 §A.1-A.2): a slow or dead
receiver must not delay another subscription's attempts, with at least 8 stuck at once.

What runs: the real delivery engine (`apps.push.engine.delivery_dispatch`, the body of the
`push.deliver` task: claim on the slot, send on the process's sender threads, lanes.py) against
real HTTPS receivers on loopback through the egress guard. The broker and the Celery worker are
stood in for by a FIFO queue feeding a thread pool the size of the worker's `--concurrency` (what
`celery worker --pool threads` does); retries and lane wake-ups are scheduled with their real
countdown. Each event of a run fans out to one delivery per matching webhook.

For each rate: phase A, 1 healthy webhook; phase B, the same plus 8 webhooks whose receivers
never answer. Reported: sustained attempts/s and the healthy receiver's delivery delay (event
committed -> delivery settled), p50/p99, and the B/A ratio at each rate.

    DJANGO_DEBUG=1 .venv/bin/python bench/push_isolation.py [--events 20] [--rates 1,4] [--concurrency 4]
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db> DJANGO_DEBUG=1 .venv/bin/python bench/push_isolation.py
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_TMP = Path(tempfile.mkdtemp(prefix="push-bench-"))
os.environ.setdefault("DJANGO_DEBUG", "1")
# A throwaway SQLite file by default (zero setup); BENCH_DATABASE_URL=postgres://... to measure on
# PostgreSQL (the database is migrated and its push tables emptied between phases).
os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{_TMP / 'bench.sqlite3'}"
os.environ["OPENWOP_VAR_DIR"] = str(_TMP)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django  # noqa: E402

django.setup()

import trustme  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from apps.agents.services import workflow_fixtures_seed  # noqa: E402
from apps.core import egress  # noqa: E402
from apps.push import engine, services  # noqa: E402
from apps.push.engine import delivery_dispatch  # noqa: E402
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus, Webhook  # noqa: E402
from apps.push.services import webhook_register, webhook_unregister  # noqa: E402
from apps.runs import tasks as run_tasks  # noqa: E402
from apps.runs.engine import run_advance  # noqa: E402
from apps.runs.services import run_create  # noqa: E402
from apps.tenants.services import tenant_get_or_create  # noqa: E402
from apps.tenants.subject import Subject  # noqa: E402
from tests.core.https_receivers import Behaviour, https_receiver  # noqa: E402

HUNG = 8


class Dispatcher:
    """A broker queue and a worker pool: FIFO, `concurrency` tasks at once, countdowns honoured."""

    def __init__(self, concurrency: int) -> None:
        self.jobs: queue.Queue[int | None] = queue.Queue()
        self.enqueued_at: dict[int, float] = {}
        self.tasks = 0
        self.timers: list[threading.Timer] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(concurrency)]
        for thread in self.threads:
            thread.start()

    def enqueue(self, *, delivery_pk: int, queue: str, countdown: float) -> None:
        with self.lock:
            self.enqueued_at.setdefault(delivery_pk, time.time())  # wall clock: compared with settled_at
        if countdown > 0:
            timer = threading.Timer(countdown, self.jobs.put, args=(delivery_pk,))
            timer.daemon = True
            with self.lock:
                self.timers.append(timer)
            timer.start()
        else:
            self.jobs.put(delivery_pk)

    def _work(self) -> None:
        while (pk := self.jobs.get()) is not None:
            try:
                delivery_dispatch(delivery_pk=pk)
            finally:
                with self.lock:
                    self.tasks += 1
                connection.close()

    def stop(self) -> None:
        with self.lock:
            for timer in self.timers:
                timer.cancel()
        for _ in self.threads:
            self.jobs.put(None)
        for thread in self.threads:
            thread.join(timeout=5)


def _receivers_main(ca: trustme.CA, names: list[tuple[str, bool]], conn: Any) -> None:
    """Child process: the receivers live apart from the engine, so their TLS work and hung handler
    threads do not share the engine's GIL (the bench measures the engine, not the receivers)."""
    with ExitStack() as stack:
        ports = [
            stack.enter_context(https_receiver(ca, name, behaviour=Behaviour(hang=hang))).port for name, hang in names
        ]
        conn.send(ports)
        conn.recv()  # stop


@contextmanager
def _receivers(ca: trustme.CA, names: list[tuple[str, bool]]) -> Iterator[list[int]]:
    parent, child = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=_receivers_main, args=(ca, names, child), daemon=True)
    process.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


def _fake_dns(host: str, port: int) -> list[egress.IPAddress]:
    return [ipaddress.ip_address("127.0.0.1")]


def _phase(name: str, *, hung: int, events: int, rate: float, concurrency: int, ca: trustme.CA) -> dict[str, float]:
    tenant, _ = tenant_get_or_create(slug="bench")
    workflow_fixtures_seed(tenant=tenant)
    subject = Subject(issuer="bench", subject_id="bench", tenant="bench", kind="user")
    for webhook_id in Webhook.objects.for_tenant(tenant.pk).values_list("webhook_id", flat=True):
        webhook_unregister(subject=subject, webhook_id=webhook_id)  # the last phase's sends may still record
    dispatcher = Dispatcher(concurrency)
    services.delivery_enqueue = dispatcher.enqueue  # type: ignore[assignment]
    engine.delivery_enqueue = dispatcher.enqueue  # type: ignore[assignment]
    names = [("healthy.bench", False)] + [(f"hung{i}.bench", True) for i in range(hung)]
    with _receivers(ca, names) as ports:
        healthy_hook = webhook_register(
            subject=subject, url=f"https://healthy.bench:{ports[0]}/h", events=["node.started"]
        )
        for i in range(hung):
            webhook_register(subject=subject, url=f"https://hung{i}.bench:{ports[i + 1]}/h", events=["node.started"])
        started = time.monotonic()
        for n in range(events):
            # One run per event keeps each event's fan-out separate; run_advance commits the rows
            # and the on-commit hook hands them to the dispatcher, as in production.
            run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
            run_advance(run_id=run.run_id, worker="bench")
            time.sleep(max(0.0, started + (n + 1) / rate - time.monotonic()))
        healthy_rows = Delivery.unscoped_all_tenants.filter(webhook__webhook_id=healthy_hook.webhook_id)
        wanted = set(healthy_rows.values_list("pk", flat=True))
        settled = healthy_rows.exclude(status=DeliveryStatus.PENDING)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and settled.count() < len(wanted):
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        rows = list(settled.values_list("pk", "settled_at", "status"))
        delays = sorted(at.timestamp() - dispatcher.enqueued_at[pk] for pk, at, _ in rows)
        delivered = sum(1 for _, _, status in rows if status == DeliveryStatus.DELIVERED)
        attempts = DeliveryAttempt.unscoped_all_tenants.count()
    dispatcher.stop()
    p99_index = min(len(delays) - 1, max(0, round(0.99 * len(delays)) - 1))
    result = {
        "p50_ms": statistics.median(delays) * 1000 if delays else float("nan"),
        "p99_ms": delays[p99_index] * 1000 if delays else float("nan"),
    }
    print(
        f"  {name:<22} healthy {delivered}/{len(wanted)} delivered; attempts {attempts} "
        f"({attempts / elapsed:.1f}/s), tasks {dispatcher.tasks}; healthy delay p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--rates", default="1,4", help="events per second, comma-separated: one A/B pair each")
    parser.add_argument("--concurrency", type=int, default=4, help="worker pool size (celery --concurrency)")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-attempt timeout, seconds")
    args = parser.parse_args()

    logging.getLogger("apps").setLevel(logging.WARNING)  # one line per attempt would drown the report
    call_command("migrate", verbosity=0)
    ca = trustme.CA()
    bundle = _TMP / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]  # loopback receivers, this bench only
    settings.OPENWOP_EGRESS_CA_BUNDLE = str(bundle)
    settings.OPENWOP_PUSH_ATTEMPT_TIMEOUT = args.timeout
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 3
    settings.OPENWOP_PUSH_BACKOFF_BASE_SECONDS = 1.0
    egress.resolve_host = _fake_dns  # type: ignore[assignment]
    run_tasks.advance.apply_async = lambda *a, **k: None  # type: ignore[method-assign] - driven in-process

    print(
        f"push isolation bench: {args.events} events per phase, pool {args.concurrency}, "
        f"attempt timeout {args.timeout}s, retryPolicy maxAttempts 3 exponential, "
        f"lane cap {settings.OPENWOP_PUSH_LANE_CAP}, senders {settings.OPENWOP_PUSH_SENDERS}"
    )
    summary = []
    for rate in (float(r) for r in args.rates.split(",")):
        print(f"{rate:g} ev/s:")
        base = _phase("A: healthy alone", hung=0, events=args.events, rate=rate, concurrency=args.concurrency, ca=ca)
        loaded = _phase(
            f"B: + {HUNG} hung receivers", hung=HUNG, events=args.events, rate=rate, concurrency=args.concurrency, ca=ca
        )
        summary.append(
            f"{rate:g} ev/s pool {args.concurrency}: ratio B/A p50 {loaded['p50_ms'] / base['p50_ms']:.2f}x, "
            f"p99 {loaded['p99_ms'] / base['p99_ms']:.2f}x"
        )
    print("\n".join(summary))


if __name__ == "__main__":
    main()
