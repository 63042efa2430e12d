"""Bench: does one healthy webhook receiver keep its delivery delay while 8 receivers hang?

webhooks.md §Durability (invariant webhook-delivery-isolation, RFC 0215 §A.1-A.2): a slow or dead
receiver must not delay another subscription's attempts, with at least 8 stuck at once.

What runs: the real delivery engine (`apps.push.engine.delivery_attempt`, the body of the
`push.deliver` task) against real HTTPS receivers on loopback through the egress guard. The broker
and the Celery worker are stood in for by a FIFO queue feeding a thread pool the size of the
worker's `--concurrency` (what `celery worker --pool threads` does); retries are scheduled with
their real countdown. Each event of a run fans out to one delivery per matching webhook.

Phase A: 1 healthy webhook. Phase B: the same plus 8 webhooks whose receivers never answer.
Reported: sustained deliveries/s and the healthy receiver's delivery delay (event committed ->
attempt answered), p50/p99, and the B/A ratio.

    DJANGO_DEBUG=1 .venv/bin/python bench/push_isolation.py [--events 40] [--rate 4] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import ipaddress
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
os.environ["DATABASE_URL"] = f"sqlite:///{_TMP / 'bench.sqlite3'}"
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
from apps.push.engine import delivery_attempt  # noqa: E402
from apps.push.models import Delivery, DeliveryStatus, Webhook  # noqa: E402
from apps.push.services import webhook_register  # noqa: E402
from apps.runs import tasks as run_tasks  # noqa: E402
from apps.runs.engine import run_advance  # noqa: E402
from apps.runs.services import run_create  # noqa: E402
from apps.tenants.services import tenant_get_or_create  # noqa: E402
from apps.tenants.subject import Subject  # noqa: E402
from tests.core.https_receivers import Behaviour, https_receiver  # noqa: E402

HUNG = 8


class Dispatcher:
    """A broker queue and a worker pool: FIFO, `concurrency` attempts at once, countdowns honoured."""

    def __init__(self, concurrency: int) -> None:
        self.jobs: queue.Queue[int | None] = queue.Queue()
        self.enqueued_at: dict[int, float] = {}
        self.done: dict[int, float] = {}
        self.attempts = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(concurrency)]
        for thread in self.threads:
            thread.start()

    def enqueue(self, *, delivery_pk: int, queue: str, countdown: float) -> None:
        with self.lock:
            self.enqueued_at.setdefault(delivery_pk, time.monotonic())
        if countdown > 0:
            threading.Timer(countdown, self.jobs.put, args=(delivery_pk,)).start()
        else:
            self.jobs.put(delivery_pk)

    def _work(self) -> None:
        while (pk := self.jobs.get()) is not None:
            try:
                delivery_attempt(delivery_pk=pk)
            finally:
                with self.lock:
                    self.attempts += 1
                    self.done[pk] = time.monotonic()
                connection.close()

    def stop(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)


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
    Webhook.unscoped_all_tenants.all().delete()
    tenant, _ = tenant_get_or_create(slug="bench")
    workflow_fixtures_seed(tenant=tenant)
    subject = Subject(issuer="bench", subject_id="bench", tenant="bench", kind="user")
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
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not wanted <= set(dispatcher.done):
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        delays = sorted(dispatcher.done[pk] - dispatcher.enqueued_at[pk] for pk in wanted if pk in dispatcher.done)
        delivered = Delivery.unscoped_all_tenants.filter(pk__in=wanted, status=DeliveryStatus.DELIVERED).count()
    dispatcher.stop()
    p99_index = min(len(delays) - 1, max(0, round(0.99 * len(delays)) - 1))
    result = {
        "healthy_delivered": float(delivered),
        "healthy_expected": float(len(wanted)),
        "attempts": float(dispatcher.attempts),
        "attempts_per_s": dispatcher.attempts / elapsed,
        "p50_ms": statistics.median(delays) * 1000 if delays else float("nan"),
        "p99_ms": delays[p99_index] * 1000 if delays else float("nan"),
    }
    print(
        f"{name:<22} healthy {int(delivered)}/{len(wanted)} delivered; attempts {dispatcher.attempts} "
        f"({result['attempts_per_s']:.1f}/s); healthy delay p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--rate", type=float, default=4.0, help="events per second")
    parser.add_argument("--concurrency", type=int, default=64, help="worker pool size (celery --concurrency)")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-attempt timeout, seconds")
    args = parser.parse_args()

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
        f"push isolation bench: {args.events} events at {args.rate}/s, pool {args.concurrency}, "
        f"attempt timeout {args.timeout}s, retryPolicy maxAttempts 3 exponential"
    )
    base = _phase("A: healthy alone", hung=0, events=args.events, rate=args.rate,
                  concurrency=args.concurrency, ca=ca)
    loaded = _phase(f"B: + {HUNG} hung receivers", hung=HUNG, events=args.events, rate=args.rate,
                    concurrency=args.concurrency, ca=ca)
    print(
        f"ratio B/A: p50 {loaded['p50_ms'] / base['p50_ms']:.2f}x, p99 {loaded['p99_ms'] / base['p99_ms']:.2f}x"
    )


if __name__ == "__main__":
    main()
