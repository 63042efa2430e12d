"""Issue 36's bench (scenario `retention`, full `make bench` only): what the retention job and the
hash chain cost GetTask. bench/README.md "Retention under load" says how to read it.

Two parts, both on the production target bench/run.py starts (uvicorn, PostgreSQL, Redis, the
Celery worker, all on BENCH_SERVER_CPUS), GetTask at c = 16:

1. **The job.** Each repeat seeds, in SQL (`seed`, run as `python bench/retention_load.py seed` in
   a Django process with the host's environment), tenant `bench-retention` with
   - `--retention-records` (1M) `negotiation.decided` records in ONE daily partition of their own,
     two days past the records window (`audit_hostevent_p<YYYYMMDD>`, created `PARTITION OF` the
     parent, filled by one `INSERT ... SELECT generate_series`, spread over SUBJECTS streams whose
     counters are seeded to match); their `digest` is a per-row SHA-256, not a chain (the expiry
     reads digests only to move each stream's anchor; nothing verifies this tenant), and
   - `--retention-runs` (100k) terminal runs five days past the runs window, each a copy of the
     bench task (the run GetTask reads) with copies of its events and A2A messages (one
     `INSERT ... SELECT` with data-modifying CTEs),
   then runs `ANALYZE`, measures GetTask without the job (for as long as the previous repeat's job
   ran, the first repeat for FIRST_WINDOW_S: a p99 is compared over windows of one length), and
   then again while `manage.py retention apply` runs: the job (the command's own call_command, in a
   process pinned to the server's CPUs as a beat worker on the same box would be, set up before the
   window) is told to go as wrk starts, and wrk is stopped (SIGINT: it still reports) the moment the job
   exits, so the "with" window is exactly the job's pass. The job deletes the seeded data, so
   every repeat seeds again. No archive is configured unless `--retention-archive` (then a
   file:// directory under var/bench/archive: export before expiry runs too, and takes most of
   the time). Each window starts after a CHECKPOINT (neither inside one the seed set off; the
   job's first write to a page is logged whole, as on data weeks old). A watcher polls
   pg_stat_activity every 100 ms in both windows and reports every backend it saw waiting on a
   lock (where a stall would come from), what every working backend waited on (per statement) and
   the window's WAL and checkpoints. A probe (one more client, one GetTask at a time) keeps each
   request's start and end; the job process times its phases (the records pass; each runs batch's
   select, statements and COMMIT) on the same clock, and each probe request is placed by the phase
   it overlapped (`probe_by_phase`): which of the job's moments make GetTask slow.
2. **The chain.** A second host started with DJANGO_SETTINGS_MODULE=bench.settings_nochain (the
   append statement and the content hash without the chain; that file says exactly what differs)
   and the shipped host, measured in turns (bench/run.py's `Bench.point`), each with its own API
   key of the bench tenant (separate streams: the shipped host's stream still verifies). After the
   point, the records of the run are counted by digest: the no-chain host's must have none.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from harness.infra import InfraCpu  # noqa: E402
from harness.procs import Server  # noqa: E402
from harness.repeats import combine  # noqa: E402
from harness.wrk import BackgroundWrk, Load, run_wrk  # noqa: E402

TENANT = "bench-retention"
SUBJECTS = 100  # streams the seeded records are spread over
CONNECTIONS = 16
NOCHAIN_SETTINGS = "bench.settings_nochain"
WITHOUT = "ours without the job"
WITH = "ours while retention apply runs"
NOCHAIN = "ours no chain (bench/settings_nochain.py)"
CHAINED = "ours chained (as shipped)"
FIRST_WINDOW_S = 70.0  # the first repeat's window without the job: about the job's time on this bench
JOB_LIMIT_S = 1800.0  # a job still running after this is killed and the scenario fails
ARCHIVE_DIR = ROOT / "var" / "bench" / "archive"


# ---------------------------------------------------------------------------------------------
# Seeding (a Django process)


def _partition_day(now: dt.datetime, records_days: int) -> dt.datetime:
    """The UTC day two days past the records window: its partition's upper bound is before the cutoff."""
    day = (now - dt.timedelta(days=records_days + 2)).astimezone(dt.UTC)
    return day.replace(hour=0, minute=0, second=0, microsecond=0)


def records_statements(*, tenant_pk: int, salt: str, records: int, day: dt.datetime,
                       subject: str, payload: str, type_: str) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    """The statements that create the day's partition and fill it with `records` records of
    `tenant_pk`, spread over SUBJECTS streams named `<salt>-<n>`, and create those streams' counters."""
    name = f"audit_hostevent_p{day:%Y%m%d}"
    params = {"tenant": tenant_pk, "salt": salt, "n": records, "subjects": SUBJECTS, "day": day, "subject": subject,
              "payload": payload, "type": type_, "spread_us": 86_400_000_000 // max(records, 1)}  # fmt: skip
    return [
        (f"CREATE TABLE {name} PARTITION OF audit_hostevent FOR VALUES FROM (%(day)s) TO (%(day)s + interval '1 day')",
         params),
        ("""INSERT INTO audit_hostevent
                (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest)
            SELECT %(tenant)s, %(salt)s || '-' || mod(g, %(subjects)s), %(subject)s::jsonb,
                   'rt-' || %(salt)s || '-' || lpad(g::text, 10, '0'), %(type)s, %(payload)s::jsonb, true,
                   g / %(subjects)s + 1, %(day)s + make_interval(secs => g::bigint * %(spread_us)s::bigint / 1e6), '',
                   encode(sha256(convert_to(%(salt)s || g::text, 'UTF8')), 'hex')
            FROM generate_series(0, %(n)s - 1) AS g""", params),
        # Chained through their counters, as the writer leaves streams whose records carry digests
        # (issue 50's chainer would otherwise stop at a head behind them and retention keep them).
        ("""INSERT INTO audit_hosteventstream (tenant_id, subject_id, last_sequence, chained_through)
            SELECT %(tenant)s, %(salt)s || '-' || s, c.n, c.n
            FROM generate_series(0, least(%(subjects)s, %(n)s) - 1) AS s,
                 LATERAL (SELECT (%(n)s - s + %(subjects)s - 1) / %(subjects)s AS n) AS c""", params),
    ]  # fmt: skip


def runs_statement(*, tenant_pk: int, slug: str, salt: str, runs: int, template_pk: int,
                   ended: dt.datetime) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """One statement: `runs` copies of run `template_pk` in `tenant_pk`, terminal at or before
    `ended` (one second apart), each with copies of the template's events and A2A messages.
    Returns (sql, params); the statement's one row is (runs, events, messages) inserted."""
    from apps.a2a.models import TaskMessage
    from apps.runs.models import Run, RunEvent

    def columns(model: Any, alias: str, replaced: dict[str, str]) -> tuple[str, str]:
        names = [f.column for f in model._meta.concrete_fields if f.column != "id"]
        return (", ".join(f'"{n}"' for n in names), ", ".join(replaced.get(n, f'{alias}."{n}"') for n in names))

    ended_at = "%(ended)s - make_interval(secs => g)"
    run_cols, run_exprs = columns(Run, "t", {
        "tenant_id": "%(tenant)s", "run_id": "%(slug)s || '/rt-' || %(salt)s || '-' || lpad(g::text, 12, '0')",
        "context_id": "''", "created_at": f"{ended_at} - interval '1 minute'",
        "started_at": f"{ended_at} - interval '1 minute'", "completed_at": ended_at, "updated_at": ended_at,
    })  # fmt: skip
    event_cols, event_exprs = columns(RunEvent, "e", {
        "tenant_id": "%(tenant)s", "run_id": "new.id", "at": "new.completed_at",
        "event_id": "'rt-' || %(salt)s || '-' || new.id || '-' || e.sequence",
    })  # fmt: skip
    message_cols, message_exprs = columns(TaskMessage, "m", {
        "tenant_id": "%(tenant)s", "run_id": "new.id", "created_at": "new.completed_at",
        "message_id": "'rt-' || %(salt)s || '-' || new.id || '-' || m.id",
    })  # fmt: skip
    runs_t, events_t, messages_t = Run._meta.db_table, RunEvent._meta.db_table, TaskMessage._meta.db_table
    sql = f"""
    WITH new AS (
        INSERT INTO {runs_t} ({run_cols}) SELECT {run_exprs}
        FROM {runs_t} AS t, generate_series(1, %(n)s) AS g WHERE t.id = %(template)s
        RETURNING id, completed_at
    ), events AS (
        INSERT INTO {events_t} ({event_cols}) SELECT {event_exprs}
        FROM new CROSS JOIN {events_t} AS e WHERE e.run_id = %(template)s RETURNING 1
    ), messages AS (
        INSERT INTO {messages_t} ({message_cols}) SELECT {message_exprs}
        FROM new CROSS JOIN {messages_t} AS m WHERE m.run_id = %(template)s RETURNING 1
    )
    SELECT (SELECT count(*) FROM new), (SELECT count(*) FROM events), (SELECT count(*) FROM messages)
    """  # our own table and column names; every value is a parameter
    params = {"tenant": tenant_pk, "slug": slug, "salt": salt, "n": runs, "template": template_pk, "ended": ended}
    return sql, params


def seed(*, records: int, runs: int, salt: str, template_pk: int | None = None, slug: str = TENANT) -> dict[str, Any]:
    """Seed `slug` with `records` records in one partition past the records window and `runs`
    terminal runs (copies of `template_pk`, default the bench task) past the runs window; what it did."""
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    from apps.audit.models import HostEvent
    from apps.runs.models import Run
    from apps.tenants.services import tenant_get_or_create

    started = time.monotonic()
    tenant, _ = tenant_get_or_create(slug=slug)
    now = timezone.now()
    if template_pk is None:
        template = (
            Run.unscoped_all_tenants.filter(tenant__slug="bench", status="completed").order_by("pk").first()
            or Run.unscoped_all_tenants.filter(status="completed").order_by("pk").first()
        )
        if template is None:
            raise RuntimeError("no completed run to copy (bench/run.py creates the bench task first)")
        template_pk = template.pk
    record = HostEvent.unscoped_all_tenants.filter(type="negotiation.decided").order_by("-id").first()
    subject = json.dumps(record.subject if record else {"tenant": slug, "subjectId": "bench"})
    payload = json.dumps(record.payload if record else {})
    day = _partition_day(now, settings.OPENWOP_RETENTION_RECORDS_DAYS)
    ended = now - dt.timedelta(days=settings.OPENWOP_RETENTION_RUNS_DAYS + 5)
    done: dict[str, Any] = {"partition": f"audit_hostevent_p{day:%Y%m%d}", "salt": salt}
    with transaction.atomic(), connection.cursor() as cursor:
        statements = records_statements(tenant_pk=tenant.pk, salt=salt, records=records, day=day, subject=subject,
                                        payload=payload, type_="negotiation.decided")  # fmt: skip
        for sql, params in statements:
            cursor.execute(sql, params)
        done["records"] = records
        sql, params = runs_statement(tenant_pk=tenant.pk, slug=slug, salt=salt, runs=runs, template_pk=template_pk,
                                     ended=ended)  # fmt: skip
        cursor.execute(sql, params)
        done["runs"], done["events"], done["messages"] = cursor.fetchone()
    done["seconds"] = round(time.monotonic() - started, 1)
    return done


# ---------------------------------------------------------------------------------------------
# The job's report and lock waits


_APPLIED = re.compile(r"retention applied as of \S+ in ([0-9.]+) s")
_DROPPED = re.compile(r"records: (\d+) partitions dropped .*?, (\d+) records deleted in batches, .*?(\d+) busy")
_RUNS = re.compile(r"runs expired: (\d+) in (\d+) batches")


def job_summary(output: str) -> dict[str, Any]:
    """The numbers of `manage.py retention apply`'s report (RetentionReport.lines)."""
    out: dict[str, Any] = {}
    if m := _APPLIED.search(output):
        out["job_seconds"] = float(m.group(1))
    if m := _DROPPED.search(output):
        out["partitions_dropped"], out["records_deleted"], out["partitions_busy"] = map(int, m.groups())
    if m := _RUNS.search(output):
        out["runs_expired"], out["run_batches"] = map(int, m.groups())
    return out


_LOCK_WAITS_SQL = """
SELECT a.wait_event, left(regexp_replace(a.query, '\\s+', ' ', 'g'), 90),
       extract(epoch FROM clock_timestamp() - a.state_change)
FROM pg_stat_activity AS a
WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' AND a.pid <> pg_backend_pid()
"""


# Every backend at work, and what it waits on ("CPU": active, waiting on nothing): the doors'
# statements (client backends of this database) and the server's own writers when they are not idle.
_WAITS_SQL = """
SELECT CASE WHEN a.backend_type = 'client backend' THEN left(regexp_replace(a.query, '\\s+', ' ', 'g'), 60)
            ELSE a.backend_type END,
       coalesce(a.wait_event_type || ':' || a.wait_event, 'CPU')
FROM pg_stat_activity AS a
WHERE a.pid <> pg_backend_pid()
  AND ((a.backend_type = 'client backend' AND a.state = 'active' AND a.datname = current_database())
       OR (a.backend_type IN ('checkpointer', 'walwriter', 'background writer', 'autovacuum worker')
           AND coalesce(a.wait_event, '') NOT IN ('CheckpointerMain', 'WalWriterMain', 'BgWriterMain',
                                                  'BgWriterHibernate', 'AutoVacuumMain')))
"""

# The server's WAL position (MB) and checkpoint counters, read as a window opens and closes. The
# counters moved from pg_stat_bgwriter to pg_stat_checkpointer in PostgreSQL 17 (the embedded
# server `make run` and `make test` start without DATABASE_URL is 18).
_SERVER_SQL = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') / 1048576.0, {counters}"
_CHECKPOINT_COUNTERS = {
    True: "num_timed + num_requested, buffers_written FROM pg_stat_checkpointer",
    False: "checkpoints_timed + checkpoints_req, buffers_checkpoint FROM pg_stat_bgwriter",
}


class _InThread:
    """`with` runs `self._run` in a daemon thread until the block ends (`self._stop` is set)."""

    join_timeout = 5.0

    def __enter__(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_timeout)

    def _run(self) -> None:
        raise NotImplementedError


@dataclass
class LockWatch(_InThread):
    """Polls pg_stat_activity every `interval` s in a thread: every (lock, statement) a backend was
    seen waiting on, how many polls saw it and the longest wait seen; every (statement or server
    process, wait event) seen at work and in how many polls (`waits`); and, between enter and exit,
    the WAL written, the checkpoints begun and the buffers they wrote (`server`)."""

    url: str
    interval: float = 0.1
    seen: dict[str, dict[str, float]] = field(default_factory=dict)
    waits: dict[str, int] = field(default_factory=dict)
    server: dict[str, float] = field(default_factory=dict)
    polls: int = 0

    def __enter__(self) -> Self:
        self._start = self._server_now()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        end = self._server_now()
        self.server = {"wal_mb": round(end["wal"] - self._start["wal"], 1),
                       "checkpoints": end["checkpoints"] - self._start["checkpoints"],
                       "checkpoint_buffers": end["buffers"] - self._start["buffers"]}  # fmt: skip

    def _server_now(self) -> dict[str, float]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            counters = _CHECKPOINT_COUNTERS[conn.info.server_version >= 170000]
            wal, checkpoints, buffers = conn.execute(_SERVER_SQL.format(counters=counters)).fetchone()  # type: ignore[misc]
        return {"wal": float(wal), "checkpoints": float(checkpoints), "buffers": float(buffers)}

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                for lock, query, waited in conn.execute(_LOCK_WAITS_SQL).fetchall():
                    entry = self.seen.setdefault(f"{lock}: {query}", {"polls": 0, "max_wait_s": 0.0})
                    entry["polls"] += 1
                    entry["max_wait_s"] = max(entry["max_wait_s"], round(float(waited or 0), 3))
                for what, wait in conn.execute(_WAITS_SQL).fetchall():
                    key = f"{wait} <- {what}"
                    self.waits[key] = self.waits.get(key, 0) + 1
                self.polls += 1
                self._stop.wait(self.interval)

    def report(self) -> dict[str, Any]:
        return {"lock_waits": self.seen, "lock_polls": self.polls, "waits": self.waits, "server": self.server}


@dataclass
class Probe(_InThread):
    """One more client beside wrk, in a thread: the same request, one at a time, each one's start
    and end (time.monotonic, which the job's phases share), so the slow requests can be placed."""

    load: Load
    pause: float = 0.01
    timings: list[tuple[float, float]] = field(default_factory=list)
    failures: int = 0
    join_timeout = 10.0  # a request in flight ends within its own timeout

    def _run(self) -> None:
        import httpx

        key = self.load.rotate[0] if self.load.rotate else ""
        headers = {name: value.replace("{{KEY}}", key) for name, value in self.load.headers.items()}
        if self.load.method != "GET":
            headers.setdefault("Content-Type", "application/json")  # as post.lua sends it
        with httpx.Client(timeout=10) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                body = self.load.body.replace("{{N}}", f"probe-{n}")
                started = time.monotonic()
                try:
                    answer = client.request(self.load.method, self.load.url, content=body, headers=headers)
                    ok = answer.status_code == 200 and self.load.ok_marker in answer.text
                except httpx.HTTPError:
                    ok = False
                if ok:
                    self.timings.append((started, time.monotonic()))
                else:
                    self.failures += 1
                self._stop.wait(self.pause)


def _quantile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0


# A request that overlapped several phases is placed in the first of them in this order.
PHASE_RANK = ("records pass", "runs batch: commit", "runs batch: statements", "runs batch: select")


def probe_by_phase(timings: list[tuple[float, float]], phases: list[tuple[str, float, float]]) -> dict[str, Any]:
    """The probe's requests by what the job was doing while each was in flight: the phase it
    overlapped (the first in PHASE_RANK if several), or "no job work" (the job resting, or no
    job): for each, how many, p50 and p99 (ms)."""
    classes: dict[str, list[float]] = {}
    for start, end in timings:
        overlapping = [name for name, a, b in phases if a < end and b > start]
        ranked = [name for name in PHASE_RANK if name in overlapping] + overlapping
        label = ranked[0] if ranked else "no job work"
        classes.setdefault(label, []).append(end - start)
    return {label: {"requests": len(values), "p50_ms": _quantile_ms(values, 0.5), "p99_ms": _quantile_ms(values, 0.99)}
            for label, values in sorted(classes.items())}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Measuring (called by bench/run.py)


@dataclass
class Host:
    """What bench/run.py hands over: the running production target and how to reach it."""

    name: str
    base: str
    keys: list[str]
    servers: list[Server]
    env: dict[str, str]  # the host's environment for manage.py and the seed
    load: Callable[[str, str], Load]  # (base, key) -> the GetTask load
    start_nochain: Callable[[], Server]
    analyze: Callable[[], None]
    database_url: str
    gen_cpus: str
    server_cpus: str


# The job as `manage.py retention apply` runs it (the same call_command), started ahead so that
# Django's start-up (4 s on the shared machine) is not inside the measured window: it prints
# "ready", waits for a line on stdin, runs one pass and prints "done" (the process's own exit
# takes another 1.5 s of connection and thread teardown, outside the window too).
JOB_SCRIPT = """
import contextlib, json, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
import django
django.setup()
from django.core.management import call_command
from apps.retention import services
phases = []
def timed(name, function):
    def run(*args, **kwargs):
        started = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            phases.append((name, started, time.monotonic()))
    return run
sanctioned = services._run_log_deletes_sanctioned
@contextlib.contextmanager
def statements():  # a runs batch's DELETEs end here; its COMMIT (deferred foreign key checks) follows
    started = time.monotonic()
    with sanctioned():
        yield
    phases.append(("runs batch: statements", started, time.monotonic()))
def batch(*args, **kwargs):  # a runs batch: its SELECT ... FOR UPDATE, its DELETEs, its COMMIT
    started, mark = time.monotonic(), len(phases)
    try:
        return expire(*args, **kwargs)
    finally:
        ended, inner = time.monotonic(), phases[mark:]
        if inner:
            phases.append(("runs batch: select", started, inner[0][1]))
            phases.append(("runs batch: commit", inner[0][2], ended))
        else:
            phases.append(("runs batch: select", started, ended))
expire = services.runs_expire_batch
services._run_log_deletes_sanctioned = statements
services.runs_expire_batch = batch
services.records_expire = timed("records pass", services.records_expire)
print("ready", flush=True)
sys.stdin.readline()
call_command("retention", "apply")
print("done", flush=True)
print("PHASES " + json.dumps(phases), flush=True)
"""


def sample_during_job(host: Host, load: Load, *, warmup: float, job_env: dict[str, str]) -> dict[str, Any]:
    """GetTask for exactly as long as the job runs: the job process started and set up, a warm-up,
    then wrk started and the job told to go at once; wrk is stopped (SIGINT: it still prints its
    report) the moment the job exits."""
    job_cmd = ["taskset", "-c", host.server_cpus, sys.executable, "-c", JOB_SCRIPT]
    job = subprocess.Popen(job_cmd, cwd=ROOT, env=job_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert job.stdin is not None and job.stdout is not None
    ready = job.stdout.readline()
    if ready.strip() != "ready":
        job.kill()
        raise RuntimeError(f"the retention job did not start: {ready}{job.stdout.read()[-2000:]}")
    run_wrk(load, connections=CONNECTIONS, seconds=warmup, threads=2, cpus=host.gen_cpus)
    infra = InfraCpu()
    cpu_before = sum(s.cpu_seconds() for s in host.servers)
    wrk = BackgroundWrk(load, connections=CONNECTIONS, threads=2, cpus=host.gen_cpus, limit_s=JOB_LIMIT_S)
    with LockWatch(host.database_url) as watch, Probe(load) as probe:
        infra.start()
        started = time.monotonic()
        wrk.start()
        job.stdin.write("go\n")
        job.stdin.flush()
        limit = threading.Timer(JOB_LIMIT_S, job.kill)  # a job that hangs ends the scenario
        limit.start()
        output, finished = [], False
        for line in iter(job.stdout.readline, ""):  # until "done", or EOF if it failed or was killed
            if line.strip() == "done":
                finished = True
                break
            output.append(line)
        job_wall = time.monotonic() - started
        result = wrk.stop()  # its report even if the job failed: wrk must not outlive the window
        window = time.monotonic() - started
        cpu_used = sum(s.cpu_seconds() for s in host.servers) - cpu_before
        infra_used = infra.seconds()
    output.append(job.stdout.read())
    _, job_status, usage = os.wait4(job.pid, 0)
    limit.cancel()
    job.returncode = os.waitstatus_to_exitcode(job_status)
    job_output = "".join(output)
    phases = [tuple(p) for line in job_output.splitlines() if line.startswith("PHASES ") for p in json.loads(line[7:])]
    job_output = "\n".join(line for line in job_output.splitlines() if not line.startswith("PHASES "))
    if not finished or job.returncode != 0:
        raise RuntimeError(f"retention apply failed (exit {job.returncode}, {job_wall:.0f} s):\n{job_output[-2000:]}")
    rss = {pid: mb for s in host.servers for pid, mb in s.rss_mb().items() if mb > 0}
    return {
        **result,
        "wall_s": round(window, 3),
        "generator_cpu_pct": round(100 * result["generator_cpu_s"] / window, 1),
        "server_cpu_pct": round(100 * cpu_used / window, 1),
        "infra_cpu_pct": round(100 * infra_used / window, 1),
        "server_max_rss_mb": round(max(rss.values()), 1) if rss else 0.0,
        "job_wall_s": round(job_wall, 2),
        "job_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),  # set-up included (before the window)
        "job_output": job_output.strip(),
        **watch.report(),
        "probe": {**probe_by_phase(probe.timings, phases), "failures": probe.failures},
        **job_summary(job_output),
    }


def sample_watched(bench: Any, host: Host, load: Load, seconds: float) -> dict[str, Any]:
    """bench.sample for `seconds` with the same lock watcher running (its cost lands on both sides alike)."""
    with LockWatch(host.database_url) as watch, Probe(load) as probe:
        sample = bench.sample(load, host.servers, CONNECTIONS, seconds=seconds)
    return {**sample, **watch.report(), "probe": {**probe_by_phase(probe.timings, []), "failures": probe.failures}}


JOB_FIELDS = ("job_seconds", "job_wall_s", "job_cpu_s", "wall_s", "runs_expired", "run_batches",
              "partitions_dropped", "partitions_busy", "records_deleted", "seed_s")  # fmt: skip


def retention_rows(without: list[dict[str, Any]], during: list[dict[str, Any]], seeds: list[dict[str, Any]],
                   *, host_name: str) -> list[dict[str, Any]]:  # fmt: skip
    """The scenario's rows: the two points (medians of their repeats), the job's numbers per repeat
    (`<field>_runs`) on the second, and a text row with every repeat's job report and lock waits."""
    base = {"scenario": "retention", "connections": CONNECTIONS}
    first = {**combine(without), **base, "target": WITHOUT}
    second = {**combine(during), **base, "target": WITH}
    for name in JOB_FIELDS:
        source = seeds if name == "seed_s" else during
        key = "seconds" if name == "seed_s" else name
        second[f"{name}_runs"] = [s.get(key) for s in source]
    for row in (first, second):
        row.pop("job_output", None)
        row.pop("lock_waits", None)
        row.pop("lock_polls", None)
        row.pop("waits", None)
        row.pop("server", None)
        row.pop("probe", None)
    lines = [f"host: {host_name}; GetTask c={CONNECTIONS}; seeded per repeat: "
             + "; ".join(f"{s['records']} records in {s['partition']}, {s['runs']} runs, {s['events']} events, "
                         f"{s['messages']} messages in {s['seconds']} s" for s in seeds[:1])]  # fmt: skip
    for i, (w, d) in enumerate(zip(without, during, strict=True)):
        lines.append(
            f"repeat {i + 1}: p99 without {w['p99_ms']} ms, with {d['p99_ms']} ms; job {d.get('job_seconds')} s "
            f"(process {d['job_wall_s']} s, its CPU {d['job_cpu_s']} s), wrk windows {w.get('wall_s')} s without, "
            f"{d['wall_s']} s with, "
            f"{d.get('partitions_dropped')} partitions dropped ({d.get('partitions_busy')} busy), "
            f"{d.get('runs_expired')} runs expired in {d.get('run_batches')} batches"
        )
        for label, sample in (("without", w), ("with", d)):
            if not sample.get("lock_waits"):
                lines.append(f"  no backend waited on a lock ({label}; {sample.get('lock_polls', 0)} polls)")
            for where, seen in sorted(sample.get("lock_waits", {}).items(), key=lambda kv: -kv[1]["max_wait_s"])[:5]:
                lines.append(f"  lock wait ({label}): {where} seen {seen['polls']}x, longest {seen['max_wait_s']} s")
            lines += _wait_lines(label, sample)
    if during:
        lines += ["last job's report:", *("  " + line for line in during[-1].get("job_output", "").splitlines())]
    text = {"scenario": "retention", "target": "the job per repeat", "connections": CONNECTIONS,
            "stdout": "\n".join(lines), "returncode": 0}  # fmt: skip
    return [first, second, text]


def _wait_lines(label: str, sample: dict[str, Any]) -> list[str]:
    """The window's server counters and the most frequent (wait <- statement) at work, per 100 polls."""
    polls, server = sample.get("lock_polls", 0), sample.get("server")
    lines = []
    if server:
        lines.append(f"  server ({label}): {server['wal_mb']} MB of WAL, {server['checkpoints']:.0f} checkpoints "
                     f"begun, {server['checkpoint_buffers']:.0f} buffers written by checkpoints")  # fmt: skip
    probe = sample.get("probe", {})
    if probe:
        lines.append(f"  probe ({label}): {probe.get('failures', 0)} requests failed")
    for phase, seen in probe.items():
        if phase != "failures":
            lines.append(f"  probe ({label}), {phase}: {seen['requests']} requests, p50 {seen['p50_ms']} ms, "
                         f"p99 {seen['p99_ms']} ms")  # fmt: skip
    for key, seen in sorted(sample.get("waits", {}).items(), key=lambda kv: -kv[1])[:8]:
        lines.append(f"  at work ({label}): {100 * seen / max(polls, 1):.1f} per 100 polls: {key}")
    return lines


def _print_row(row: dict[str, Any]) -> None:
    runs = "/".join(f"{r:.0f}" for r in row["rps_runs"])
    print(f"  {row['scenario']:12} {row['target']:40} c={row['connections']:<3} {row['rps']:>8.1f} req/s ({runs})"
          f"  p50 {row['p50_ms']:>7.2f} ms  p99 {row['p99_ms']:>7.2f} ms ({'/'.join(map(str, row['p99_ms_runs']))})"
          f"  bad {row['bad'] + row['socket_errors']:>4}", flush=True)  # fmt: skip


def _seed(host: Host, *, records: int, runs: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(BENCH / "retention_load.py"), "seed", "--records", str(records), "--runs", str(runs),
         "--salt", secrets.token_hex(4)],
        cwd=ROOT, env=host.env, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"seeding failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# What the job leaves dead (this machine's PostgreSQL runs with autovacuum off): vacuumed after
# every pass, as autovacuum would, so no repeat and no later scenario reads through the bloat.
VACUUMED = ("runs_run", "runs_runevent", "a2a_taskmessage", "runs_runtally", "audit_hosteventstream")


def _vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for table in VACUUMED:
            conn.execute(f"VACUUM (ANALYZE) {table}")


def _checkpoint(url: str) -> None:
    """A checkpoint before each window, so that both start with no checkpoint under way and no
    dirty page the seed left (the job's first touch of a page then logs it whole, as it would on
    data weeks old in production)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def job_point(bench: Any, host: Host, *, records: int, runs: int, archive: bool) -> list[dict[str, Any]]:
    """Part 1: per repeat, seed, then GetTask without the job, then while it runs."""
    load = host.load(host.base, host.keys[0])
    job_env = dict(host.env)
    if archive:
        ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
        job_env["OPENWOP_ARCHIVE_URL"] = ARCHIVE_DIR.as_uri()
    without: list[dict[str, Any]] = []
    during: list[dict[str, Any]] = []
    seeds: list[dict[str, Any]] = []
    for i in range(bench.repeats):
        seeds.append(_seed(host, records=records, runs=runs))
        host.analyze()  # fresh statistics after a million rows, as autovacuum would have them
        print(f"  retention repeat {i + 1}: seeded {seeds[-1]}", flush=True)
        # As long as the job's window (the previous repeat's; the first: a guess): a p99 over 10 s
        # against one over 70 s compares windows that catch the host's rare slow moments unequally.
        window = during[-1]["wall_s"] if during else FIRST_WINDOW_S
        _checkpoint(host.database_url)
        without.append(sample_watched(bench, host, load, window))
        _checkpoint(host.database_url)
        during.append(sample_during_job(host, load, warmup=bench.warmup, job_env=job_env))
        _vacuum(host.database_url)
        print(f"  retention repeat {i + 1}: p99 without {without[-1]['p99_ms']} ms, with {during[-1]['p99_ms']} ms;"
              f" job {during[-1].get('job_seconds')} s, window {during[-1]['wall_s']} s", flush=True)  # fmt: skip
    rows = retention_rows(without, during, seeds, host_name=host.name)
    for row in rows[:2]:
        _print_row(row)
    return rows


_DIGESTS_SQL = """
SELECT e.subject_id, count(*) FILTER (WHERE e.digest = ''), count(*) FILTER (WHERE e.digest <> '')
FROM audit_hostevent AS e JOIN tenants_tenant AS t ON t.id = e.tenant_id
WHERE t.slug = 'bench' AND e.at >= %s GROUP BY e.subject_id ORDER BY e.subject_id
"""


def chain_point(bench: Any, host: Host) -> dict[str, Any]:
    """Part 2: the no-chain host and the shipped one, in turns; then the records written meanwhile,
    per stream (one API key each), by digest: the no-chain host's stream must have none."""
    import psycopg

    nochain = host.start_nochain()
    since = dt.datetime.now(dt.UTC)
    try:
        nochain_base = f"http://127.0.0.1:{nochain.port}"
        worker = [s for s in host.servers if s.name == "celery"]
        bench.point("chain", CONNECTIONS, [
            (NOCHAIN, host.load(nochain_base, host.keys[1]), [nochain, *worker]),
            (CHAINED, host.load(host.base, host.keys[0]), host.servers),
        ])  # fmt: skip
    finally:
        nochain.stop()
    with psycopg.connect(host.database_url, autocommit=True) as conn:
        counts = conn.execute(_DIGESTS_SQL, (since,)).fetchall()
    cost = subprocess.run([sys.executable, str(BENCH / "retention_load.py"), "chaincost", "--n", "1000"],
                          cwd=ROOT, env=host.env, capture_output=True, text=True)  # fmt: skip
    lines = [
        cost.stdout.strip() if cost.returncode == 0 else f"chaincost failed: {cost.stderr[-1500:]}",
        *(
            f"stream {subject}: {blank} records without a digest, {chained} with one"
            for subject, blank, chained in counts
        ),
    ]
    return {"scenario": "chain", "target": "records written during the point, per stream, by digest",
            "connections": CONNECTIONS, "stdout": "\n".join(lines), "returncode": 0,
            "streams": [list(row) for row in counts]}  # fmt: skip


def chain_cost(*, n: int) -> str:
    """In-process, without HTTP: the chain's two parts timed alone on the bench database (tenant
    `bench-chaincost`, one stream per statement), `n` times in alternation: the Python content hash
    of a real record, and the shipped statement against NOCHAIN_SQL, as the group commit runs them
    (a psycopg connection in autocommit, so each execution is its own transaction, prepared after
    psycopg's 5 executions), for a batch of 1 record and of 16 records of one stream (what c = 16
    on one API key batches). Medians and p90 in microseconds."""
    import psycopg
    from django.utils import timezone

    from apps.audit.chain import APPEND_SQL, content_hash
    from apps.audit.models import HostEvent, HostEventStream
    from apps.core.ids import mint_opaque
    from apps.tenants.services import tenant_get_or_create
    from bench.settings_nochain import NOCHAIN_SQL

    tenant, _ = tenant_get_or_create(slug="bench-chaincost")
    record = HostEvent.unscoped_all_tenants.filter(type="negotiation.decided").order_by("-id").first()
    subject = record.subject if record else {"tenant": tenant.slug, "subjectId": "bench"}
    payload = record.payload if record else {}
    salt = secrets.token_hex(4)
    variants = [(f"{label} x{size}", sql, size, f"{label}-{size}-{salt}")
                for size in (1, 16) for label, sql in (("chained", APPEND_SQL), ("no chain", NOCHAIN_SQL))]  # fmt: skip
    HostEventStream.unscoped_all_tenants.bulk_create(
        [HostEventStream(tenant=tenant, subject_id=stream) for *_, stream in variants]
    )
    times: dict[str, list[float]] = {"content hash (Python), one record": [], **{v[0]: [] for v in variants}}

    def params(stream: str, size: int, chained: bool) -> dict[str, list[Any]]:
        rows = [(mint_opaque(), timezone.now()) for _ in range(size)]
        contents = [content_hash(tenant=tenant.slug, subject_id=stream, subject=subject, event_id=event_id,
                                 type="negotiation.decided", durable=True, at=at, payload=payload)
                    if chained else "" for event_id, at in rows]  # fmt: skip
        return {"tenant_id": [tenant.pk] * size, "subject_id": [stream] * size,
                "subject": [json.dumps(subject)] * size, "event_id": [r[0] for r in rows],
                "type": ["negotiation.decided"] * size, "payload": [json.dumps(payload)] * size,
                "durable": [True] * size, "ordinal": list(range(1, size + 1)), "at": [r[1] for r in rows],
                "content": contents}  # fmt: skip

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn, conn.cursor() as cursor:
        for i in range(n + 50):  # the first 50: warm-up (statements prepared, caches warm)
            started = time.perf_counter()
            content_hash(tenant=tenant.slug, subject_id="s", subject=subject, event_id=mint_opaque(),
                         type="negotiation.decided", durable=True, at=timezone.now(), payload=payload)  # fmt: skip
            hashed = time.perf_counter() - started
            for label, sql, size, stream in variants if i % 2 else variants[::-1]:
                values = params(stream, size, sql is APPEND_SQL)
                started = time.perf_counter()
                cursor.execute(sql, values)
                cursor.fetchall()
                if i >= 50:
                    times[label].append(time.perf_counter() - started)
            if i >= 50:
                times["content hash (Python), one record"].append(hashed)

    def us(values: list[float], q: float) -> float:
        return round(sorted(values)[int(len(values) * q)] * 1e6, 1)

    lines = [f"in-process, {n} statements per variant, alternating (microseconds, median / p90):"]
    lines += [f"  {label}: {us(v, 0.5)} / {us(v, 0.9)}" for label, v in times.items()]
    for size in (1, 16):
        extra = us(times[f"chained x{size}"], 0.5) - us(times[f"no chain x{size}"], 0.5)
        lines.append(f"  the chain per record, batches of {size}: {round(extra / size, 1)} us in the statement"
                     f" + {us(times['content hash (Python), one record'], 0.5)} us content hash")  # fmt: skip
    return "\n".join(lines)


def scenario(bench: Any, host: Host, *, records: int, runs: int, archive: bool) -> None:
    """Both parts; their rows are appended to bench.rows."""
    bench.rows.extend(job_point(bench, host, records=records, runs=runs, archive=archive))
    bench.rows.append(chain_point(bench, host))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["seed", "chaincost"])
    parser.add_argument("--n", type=int, default=1000, help="chaincost: records per variant")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--salt", default=secrets.token_hex(4))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
    import django

    django.setup()
    if args.action == "chaincost":
        print(chain_cost(n=args.n))
    else:
        print(json.dumps(seed(records=args.records, runs=args.runs, salt=args.salt)))


if __name__ == "__main__":
    main()
