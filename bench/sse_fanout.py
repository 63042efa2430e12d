"""SSE fan-out (issue 11, scenario 5): N concurrent subscribers on ONE run's `GET /runs/{id}/events`,
and the delay from each event's commit to its receipt by every subscriber.

Three roles, three kinds of process, all on this machine (one clock, `time.time()`):

- the **producer** (`sse_fanout.py produce`, Django with the host's production env): creates a
  `running` run owned by the bench tenant, waits for "go" on stdin, then appends `--events`
  events through `apps.runs.log.event_append` (the only writer, which wakes the run's channel-layer
  group on commit), one every `--interval` seconds, each in its own durable transaction. The commit
  instant is `time.time()` taken right after `transaction.atomic()` returns (COMMIT acknowledged,
  on_commit wake-up sent). Last a `run.completed` event ends every stream.
- the **subscribers** (`sse_fanout.py subscribe`, asyncio raw sockets, pinned to BENCH_GEN_CPUS):
  one or two processes holding `--n` connections; an event is received when its blank line has been
  parsed (after de-chunking). They print each subscriber's (sequence, receipt time) pairs.
- the **driver** (`fanout()`, called by bench/run.py): starts the others, joins the two, and reports
  p50/p99/max of receipt - commit over every (subscriber, event), how many subscribers got every
  event (a missing one is an error), and the subscriber processes' own CPU (wait4 rusage).

The event's wire `timestamp` is `RunEvent.at`, taken in `event_append` before the INSERT (so a
little before commit); the delay from it is reported beside the main figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MEASURED_TYPE = "bench.tick"

# ---------------------------------------------------------------------------------------------
# The client side: de-chunking, SSE parsing, delays (pure; tests/bench/test_sse_fanout.py)


class ChunkDecoder:
    """HTTP/1.1 chunked transfer decoding, incremental: feed bytes, get body bytes."""

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0  # data bytes still due in the current chunk
        self.crlf = False  # the CRLF after a chunk's data is still due
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = bytearray()
        while not self.done:
            if self.left:
                take = self.buf[: self.left]
                out += take
                self.buf = self.buf[len(take) :]
                self.left -= len(take)
                if self.left:
                    break
                self.crlf = True
            if self.crlf:
                if len(self.buf) < 2:
                    break
                self.buf, self.crlf = self.buf[2:], False
            line_end = self.buf.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buf[:line_end].split(b";")[0], 16)
            self.buf = self.buf[line_end + 2 :]
            self.done = size == 0
            self.left = size
        return bytes(out)


class SseParser:
    """Server-sent events from a byte stream: yields (id, event, data) per complete event."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> Iterator[tuple[str, str, str]]:
        self.buf += data.replace(b"\r\n", b"\n")
        while (end := self.buf.find(b"\n\n")) >= 0:
            block, self.buf = self.buf[:end].decode("utf-8"), self.buf[end + 2 :]
            fields: dict[str, list[str]] = {}
            for line in block.split("\n"):
                if not line or line.startswith(":"):
                    continue
                name, _, value = line.partition(":")
                fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
            if "data" in fields:
                yield fields.get("id", [""])[-1], fields.get("event", ["message"])[-1], "\n".join(fields["data"])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summarize(commits: dict[int, float], stamps: dict[int, float], receipts: list[dict[int, float]]) -> dict[str, Any]:
    """Delays over every (subscriber, measured event): receipt - commit (and - the wire timestamp).
    A subscriber that missed any measured event counts as incomplete; each missing pair is an error."""
    delays, from_stamp, missing, complete = [], [], 0, 0
    for got in receipts:
        lost = 0
        for seq, committed in commits.items():
            if seq not in got:
                lost += 1
                continue
            delays.append(1000 * (got[seq] - committed))
            from_stamp.append(1000 * (got[seq] - stamps[seq]))
        missing += lost
        complete += lost == 0
    out: dict[str, Any] = {"events": len(commits), "subscribers_complete": complete, "missing_events": missing}
    for name, values in (("", delays), ("stamp_", from_stamp)):
        if values:
            out.update({
                f"{name}p50_ms": round(percentile(values, 50), 2),
                f"{name}p99_ms": round(percentile(values, 99), 2),
                f"{name}max_ms": round(max(values), 2),
            })  # fmt: skip
    return out


class _Subscription(asyncio.Protocol):
    """One subscriber as a bare asyncio protocol: every byte is handled in `data_received`, with
    the receipt time taken as it arrives. (asyncio streams with a `wait_for` per read cost ~70 us
    of the subscriber process's CPU per delivered event, a Task per read on Python 3.11: 1,000
    subscribers then took ~70 ms of client CPU to take in ONE event, which the delays measured.)"""

    def __init__(self, request: bytes, opened: Callable[[], None]) -> None:
        self.request = request
        self.opened_callback = opened
        self.opened = False
        self.head = b""
        self.in_body = False
        self.chunked = False
        self.chunks, self.sse = ChunkDecoder(), SseParser()
        self.got: dict[int, float] = {}
        self.done: asyncio.Future[dict[int, float]] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end], self.head[end + 4 :]
            self.in_body = True
            status = head.split(b"\r\n", 1)[0]
            if b" 200 " not in status + b" ":
                self._end(RuntimeError(f"subscribe answered {status!r}"))
                return
            self.chunked = b"transfer-encoding: chunked" in head.lower()
        body = self.chunks.feed(data) if self.chunked else data
        if not self.opened and b": stream open" in body:
            self.opened = True
            self.opened_callback()
        for event_id, event, _raw in self.sse.feed(body):
            if event == MEASURED_TYPE:
                self.got[int(event_id)] = now
            elif event == "run.completed":
                self._end(None)
                return
        if self.chunked and self.chunks.done:
            self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(None)

    def _end(self, error: Exception | None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(self.got)
            else:
                self.done.set_exception(error)
        if self.transport is not None:
            self.transport.close()


async def _subscriber(
    host: str, port: int, path: str, key: str, ready: asyncio.Event, counter: list[int], n: int, timeout: float
) -> dict[int, float]:
    counted = False

    def count_in() -> None:  # opened, or failed before opening: either way no longer awaited
        nonlocal counted
        if counted:
            return
        counted = True
        counter[0] += 1
        if counter[0] == n:
            ready.set()

    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        "Accept: text/event-stream\r\nX-Forwarded-Proto: https\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    try:
        _, subscription = await loop.create_connection(lambda: _Subscription(request, count_in), host, port)
        try:
            return await asyncio.wait_for(asyncio.shield(subscription.done), timeout)
        except TimeoutError:  # what arrived in time (a missing event is counted as one)
            subscription._end(None)
            return subscription.got
    finally:
        count_in()


async def _subscribe(args: argparse.Namespace) -> dict[str, Any]:
    ready = asyncio.Event()
    counter = [0]
    keys = args.keys.split(",")
    tasks = [
        asyncio.create_task(
            _subscriber(args.host, args.port, args.path, keys[i % len(keys)], ready, counter, args.n, args.timeout)
        )
        for i in range(args.n)
    ]
    await asyncio.wait_for(ready.wait(), args.timeout)
    print("ready", flush=True)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    receipts = [sorted(r.items()) if isinstance(r, dict) else [] for r in results]
    return {"receipts": receipts, "failed_streams": len(errors), "errors": sorted(set(errors))[:5]}


def subscribe_main(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.n + 256)), hard))
    # uvloop (uvicorn's own loop, installed with the host) takes a delivery in a fraction of the
    # stock loop's CPU: the subscribers are the instrument and must not be what is measured.
    import uvloop

    report = uvloop.run(_subscribe(args))
    # The report goes to a file: through the stdout pipe, a report over 64 KiB came out cut.
    Path(args.report).write_text(json.dumps(report))


# ---------------------------------------------------------------------------------------------
# The producer (Django, the host's production env)


def produce_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
    import django

    django.setup()
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from apps.core.ids import mint_bound_id, project_id
    from apps.runs.log import event_append, run_save
    from apps.runs.models import Run, RunStatus
    from apps.tenants.models import Tenant

    tenant = Tenant.objects.get(slug=args.tenant)
    runs = Run.objects.for_tenant(tenant)
    template = runs.order_by("-id").first()
    assert template is not None, f"no run in tenant {args.tenant!r} to copy the owner and workflow from"
    now = timezone.now()
    run = Run.objects.create(
        tenant=template.tenant, run_id=mint_bound_id(args.tenant), owner=template.owner, workflow=template.workflow,
        definition=template.definition, transport=template.transport, status=RunStatus.RUNNING, started_at=now,
        queue=template.queue,
        # Held by the producer for the whole measurement: the workers' sweeper takes a running run
        # that no worker holds as one whose message was lost, and would execute its workflow (a
        # terminal event after three frames ended every stream early: s13-sse-a).
        lease_owner="bench-producer", lease_expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    print(json.dumps({"segment": project_id(run.run_id)}), flush=True)
    sys.stdin.readline()  # "go": every subscriber is connected

    def append(type_: str, **fields: Any) -> tuple[int, float, float]:
        with transaction.atomic(durable=True):
            locked = runs.select_for_update().get(pk=run.pk)
            event = event_append(run=locked, type=type_, payload={"bench": True})
            for name, value in fields.items():
                setattr(locked, name, value)
            run_save(locked, *fields)
        return event.sequence, time.time(), event.at.timestamp()

    for _ in range(args.events):
        started = time.monotonic()
        seq, committed, stamp = append(MEASURED_TYPE)
        print(json.dumps({"sequence": seq, "commit": committed, "stamp": stamp}), flush=True)
        time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    append("run.completed", status=RunStatus.COMPLETED, completed_at=timezone.now())
    print(json.dumps({"done": True}), flush=True)


# ---------------------------------------------------------------------------------------------
# The driver (bench/run.py)


def fanout(
    *, port: int, keys: list[str], env: dict[str, str], gen_cpus: str, subscribers: int, events: int, interval: float,
    servers: list[Any] = (),
) -> dict[str, Any]:  # fmt: skip
    """One measurement: `subscribers` on a fresh run, `events` events. `env` is the host's; the
    subscribers run in one process up to 500 connections, two above."""
    me = [sys.executable, str(Path(__file__).resolve())]
    producer = subprocess.Popen(
        [*me, "produce", "--events", str(events), "--interval", str(interval)],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert producer.stdin is not None and producer.stdout is not None
    segment = json.loads(producer.stdout.readline())["segment"]
    procs = 1 if subscribers <= 500 else 2
    shares = [subscribers // procs + (i < subscribers % procs) for i in range(procs)]
    timeout = 60 + events * interval * 4
    path = f"/runs/{segment}/events"
    reports = Path(tempfile.mkdtemp(prefix="sse-fanout-"))
    subs = []
    for n in shares:
        cmd = ["taskset", "-c", gen_cpus, *me, "subscribe", "--port", str(port), "--path", path,
               "--keys", ",".join(keys), "--n", str(n), "--timeout", str(timeout),
               "--report", str(reports / f"subscriber-{len(subs)}.json")]  # fmt: skip
        subs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True))
    errors: list[str] = []
    failed = 0
    for sub in subs:
        assert sub.stdout is not None
        line = sub.stdout.readline().strip()
        if line != "ready":
            errors.append(f"a subscriber process did not get all its streams open ({line[:200]!r})")

    def server_cpu() -> float:  # the host's process tree(s), from /proc (bench/harness/procs.py)
        return sum(s.cpu_seconds() for s in servers)

    cpu_before = server_cpu()
    wall = time.monotonic()
    producer.stdin.write("go\n")
    producer.stdin.flush()
    commits, stamps = {}, {}
    for line in producer.stdout:
        doc = json.loads(line)
        if "sequence" in doc:
            commits[doc["sequence"]], stamps[doc["sequence"]] = doc["commit"], doc["stamp"]
    producer.wait(timeout=60)
    receipts: list[dict[int, float]] = []
    sub_cpu = 0.0
    for sub in subs:
        assert sub.stdout is not None
        sub.stdout.read()
        _, _status, usage = os.wait4(sub.pid, 0)
        sub.returncode = 0
        sub_cpu += usage.ru_utime + usage.ru_stime
        written = reports / f"subscriber-{subs.index(sub)}.json"
        report = json.loads(written.read_text()) if written.exists() else {"receipts": [], "failed_streams": 0}
        receipts.extend({int(s): t for s, t in got} for got in report["receipts"])
        failed += report["failed_streams"]
        errors.extend(report.get("errors", []))
    shutil.rmtree(reports, ignore_errors=True)
    wall = time.monotonic() - wall
    got_total = len(receipts)
    receipts += [{}] * (subscribers - got_total)  # a subscriber that never reported missed everything
    row = {
        "scenario": "sse",
        "target": f"ours {subscribers} subscribers",
        "connections": subscribers,
        **summarize(commits, stamps, receipts),
        "interval_s": interval,
        "subscriber_processes": procs,
        "wall_s": round(wall, 3),
        "generator_cpu_pct": round(100 * sub_cpu / wall, 1),
        "failed_streams": failed,  # streams that did not open (e.g. a 500) or broke: their events count as missing
        "errors": errors,
    }
    if servers:
        row["server_cpu_pct"] = round(100 * (server_cpu() - cpu_before) / wall, 1)
    row["stdout"] = (
        f"  sse          {subscribers:>5} subscribers  {row['events']} events  p50 {row.get('p50_ms', 0):>7.2f} ms"
        f"  p99 {row.get('p99_ms', 0):>7.2f} ms  max {row.get('max_ms', 0):>7.2f} ms  complete"
        f" {row['subscribers_complete']}/{subscribers}  missing {row['missing_events']}  failed streams {failed}"
        f"  subscriber cpu {row['generator_cpu_pct']:>5.1f}%  server cpu {row.get('server_cpu_pct', 0):>5.1f}%"
    )
    print(row["stdout"], flush=True)
    return row


def fanout_rows(levels: list[int], **kwargs: Any) -> list[dict[str, Any]]:
    """Every level in one run, plus the ratio of each level's p99 to the first's."""
    rows = [fanout(subscribers=n, **kwargs) for n in levels]
    base = rows[0].get("p99_ms")
    for row in rows:
        if base and row.get("p99_ms") is not None:
            row["p99_ratio_to_first"] = round(row["p99_ms"] / base, 2)
            row["stdout"] += f"  p99 / {rows[0]['connections']} subscribers' {row['p99_ratio_to_first']:.2f}"
        row["target_met"] = (
            row["connections"] >= 1000 and row["missing_events"] == 0 and row.get("p99_ms", 1e9) < 50
        ) if row["connections"] >= 1000 else None  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--tenant", default="bench")
    p.add_argument("--events", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.1)
    s = sub.add_parser("subscribe")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--path", required=True)
    s.add_argument("--keys", required=True, help="comma list: subscriber i uses key i mod len")
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--timeout", type=float, default=120.0)
    s.add_argument("--report", required=True, help="file the receipts are written to, as JSON")
    args = parser.parse_args()
    (produce_main if args.role == "produce" else subscribe_main)(args)


if __name__ == "__main__":
    main()
