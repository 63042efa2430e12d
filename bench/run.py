"""`make bench` / `make bench-quick`: our host against the reference servers, side by side.

Every scenario runs ours and the peer(s) in the same invocation, each server pinned to the same
core set (BENCH_SERVER_CPUS, default "1") and wrk on its own (BENCH_GEN_CPUS, default "0"); each
measurement is preceded by a warm-up run against the same server. Every point is measured N times
(--repeats: 3 in --quick, 5 in the full run), the targets taking turns (ours, peer, ours, peer, ...),
so drift in the machine's load hits each side alike; a row's numbers are the medians of its repeats,
every repeat kept beside them (`rps_runs`, ...), and ratios are ratios of medians (bench/harness/repeats.py).
CPU per request counts the server's processes and the PostgreSQL and Redis processes they use.
The peer's database is created anew for each run, so both sides list exactly the seeded tasks.

Ours runs with production settings: DJANGO_DEBUG=0, a secret key, PostgreSQL, Redis, requests as
a TLS-terminating proxy forwards them (X-Forwarded-Proto: https), a real Celery worker for runs.
The peers run from their own venv (BENCH_PEER_VENV, created from bench/peers/requirements.txt).

    .venv/bin/python bench/run.py --quick            # under 12 minutes
    .venv/bin/python bench/run.py                    # everything
    .venv/bin/python bench/run.py --scenarios gettask,asgi --seconds 10

Results: bench/results/<date>.json, .md and .png (bench/harness/report.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import fairness  # noqa: E402
import retention_load  # noqa: E402
import sse_fanout  # noqa: E402
from harness import report  # noqa: E402
from harness.infra import InfraCpu, postgres_meta, redis_meta  # noqa: E402
from harness.procs import Server, free_port  # noqa: E402
from harness.repeats import combine  # noqa: E402
from harness.wrk import Load, run_wrk  # noqa: E402

VENV_BIN = Path(sys.executable).parent
VAR = ROOT / "var" / "bench"
PEER_VENV = Path(os.environ.get("BENCH_PEER_VENV", str(VAR / "peer-venv")))
SERVER_CPUS = os.environ.get("BENCH_SERVER_CPUS", "1")
GEN_CPUS = os.environ.get("BENCH_GEN_CPUS", "0")
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/openwop_bench")
PEER_DATABASE_URL = os.environ.get("BENCH_PEER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/openwop_bench_ref")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
A2A_VERSION = "1.0"
MCP_VERSION = "2026-07-28"
PROXY = {"X-Forwarded-Proto": "https"}  # what the TLS-terminating proxy in front of production adds

SCENARIOS = (
    "gettask", "listpage", "card", "sendmessage", "mcp", "negotiation", "asgi", "listtasks", "sse", "retention",
    "fairness",
)  # fmt: skip
QUICK = {
    "seconds": 3.0,
    "warmup": 1.0,
    "repeats": 3,
    "scenarios": ("gettask", "listpage", "card", "sendmessage", "mcp", "negotiation", "fairness"),
}
LIST_PAGE_TASKS = 10_000  # the `listpage` tenant's size (issue 13: a page of 20 from 10k tasks)
LIST_PAGE_SIZE = 20
FULL = {"seconds": 10.0, "warmup": 3.0, "repeats": 5, "scenarios": SCENARIOS}
CONCURRENCY = (1, 16, 64)

# The ASGI servers we could ship; "recommended" is what ours runs as in every other scenario.
ASGI_VARIANTS: dict[str, Callable[[int, int], list[str]]] = {
    "daphne": lambda port, _w: [
        str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "openwop_host.asgi:application",
    ],
    "uvicorn": lambda port, w: [
        str(VENV_BIN / "uvicorn"), "openwop_host.asgi:application", "--host", "127.0.0.1", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--workers", str(w), "--no-access-log", "--log-level", "warning",
        "--lifespan", "off", "--no-proxy-headers",
    ],
    "gunicorn": lambda port, w: [
        str(VENV_BIN / "gunicorn"), "openwop_host.asgi:application", "-k", "uvicorn_worker.UvicornWorker",
        "-w", str(w), "-b", f"127.0.0.1:{port}", "--log-level", "warning",
    ],
}  # fmt: skip
RECOMMENDED = os.environ.get("BENCH_ASGI", "uvicorn")  # bench/README.md "ASGI server"
WORKERS = int(os.environ.get("BENCH_WORKERS", "1"))  # ours and every peer alike


# ---------------------------------------------------------------------------------------------
# Setup


def _ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def _reset_database(url: str) -> None:
    """The peer's database, created anew: the SDK's store keeps every task of every earlier run under
    the one unauthenticated owner, so a kept database listed far more than the seeded tasks (issue 34)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _settle() -> None:
    """Before each scenario, the statistics autovacuum would have kept: this machine's PostgreSQL
    runs with autovacuum off (meta.postgres), and a fresh bench database grows by tens of thousands
    of runs and events in the write scenarios. Without it GetTask after them was planned from the
    statistics of near-empty tables (runs_runevent: 81,600 rows changed since the last ANALYZE) and
    fell to 90 req/s with PostgreSQL at 89 % of a core (results/s10-quick-stale-stats.md)."""
    _analyze(DATABASE_URL)
    _analyze(PEER_DATABASE_URL)
    from openwop_host.embedded_postgres import running_database_url

    default_url = running_database_url(DEFAULT_VAR / "pg")  # the make-run host's embedded server, with its password
    if default_url is not None:
        _analyze(default_url)


def _analyze(url: str) -> None:
    """Fresh planner statistics, as autovacuum keeps them on a production server. Without them
    (this machine's PostgreSQL runs with autovacuum off, and every run adds rows) a run's log read
    was planned as a BitmapAnd over the tenant index: 6.8 ms instead of 0.13 ms (bench/README.md)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _ensure_peer_venv() -> None:
    if (PEER_VENV / "bin" / "uvicorn").exists():
        return
    print(f"creating the peer venv {PEER_VENV} (reference servers' own dependencies)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run(
        [str(PEER_VENV / "bin" / "pip"), "install", "-q", "-r", str(BENCH / "peers" / "requirements.txt")], check=True
    )


def host_env(port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=_SECRET,
        DATABASE_URL=DATABASE_URL,
        REDIS_URL=REDIS_URL,
        OPENWOP_PUBLIC_URL=f"http://127.0.0.1:{port}",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        OPENWOP_CELERY_QUEUE="openwop-bench",
        OPENWOP_VAR_DIR=str(VAR / "host"),
        DJANGO_LOG_LEVEL="WARNING",
        DJANGO_SECURE_PROXY_SSL_HEADER="1",  # trust PROXY's X-Forwarded-Proto, as behind the real proxy
    )
    env.setdefault("OPENWOP_MAX_STREAMS_PER_KEY", "128")  # sse: 1000 subscribers over the 16 keys (default 32)
    env.setdefault("DATABASE_POOL_MAX_SIZE", os.environ.get("BENCH_DATABASE_POOL_MAX_SIZE", "8"))
    # The per-key request limit stays on (its cache round trip is part of every request's cost)
    # but out of reach: one bench key sends far more than a client may per minute in production.
    env.setdefault("OPENWOP_RATE_LIMIT_REQUESTS", "1000000000")
    # Likewise the tenant's request budget (6,000 a minute by default: one wrk client of the bench's
    # tenant passes it in seconds) and the stream caps (sse: 1,000 subscribers in one tenant). The
    # fairness scenario sets them back to the host's defaults (bench/fairness.py HOST_ENV).
    env.setdefault("OPENWOP_TENANT_REQUESTS_PER_MINUTE", "1000000000")
    env.setdefault("OPENWOP_TENANT_STREAMS", "1000000")
    env.setdefault("OPENWOP_MAX_STREAMS", "1000000")
    # Every run mints its keys in the same bench database: past 100 a tenant would be refused more.
    env.setdefault("OPENWOP_TENANT_API_KEYS", "0")
    return env


_SECRET = secrets.token_urlsafe(48)
_MAKE_KEYS = """
from apps.tenants.services import api_key_create, tenant_get_or_create
tenant, _ = tenant_get_or_create(slug="bench")
print(" ".join(api_key_create(tenant=tenant, kind="user", label="bench")[1] for _ in range(16)))
"""


def manage(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=host_env(0), check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


WORKER_CONCURRENCY = 16


def start_worker() -> Server:
    # One pooled connection per worker thread: with the host's pool of 8, half of the 16 threads
    # could wait on the pool (10 s, then the step fails and the run waits for the sweeper).
    env = {**host_env(0), "DATABASE_POOL_MAX_SIZE": str(WORKER_CONCURRENCY)}
    worker = Server(
        name="celery",
        cmd=[str(VENV_BIN / "celery"), "-A", "openwop_host", "worker", "--pool", "threads",
             "--concurrency", str(WORKER_CONCURRENCY),
             "-Q", "openwop-bench", "--loglevel", "warning", "--without-gossip", "--without-mingle"],
        env=env, cwd=ROOT, log=VAR / "logs" / "celery.log",
    )  # fmt: skip
    worker.start(cpus=SERVER_CPUS)
    return worker


def start_beat() -> Server:
    """Celery beat as `make run` and the chart run it (the stuck-run sweeper every 30 s among its
    jobs), from a fresh schedule file: every job's first run is one period after the start."""
    schedule = VAR / "beat" / "celerybeat-schedule"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    for old in schedule.parent.glob("celerybeat-schedule*"):
        old.unlink()
    beat = Server(
        name="beat",
        cmd=[str(VENV_BIN / "celery"), "-A", "openwop_host", "beat", "--schedule", str(schedule),
             "--loglevel", "warning"],
        env=host_env(0), cwd=ROOT, log=VAR / "logs" / "beat.log",
    )  # fmt: skip
    beat.start(cpus=SERVER_CPUS)
    return beat


def start_host(variant: str, workers: int, **env: str) -> Server:
    port = free_port()
    server = Server(
        name=f"ours-{variant}", cmd=ASGI_VARIANTS[variant](port, workers), env={**host_env(port), **env}, cwd=ROOT,
        log=VAR / "logs" / f"host-{variant}-{workers}.log", port=port,
    )  # fmt: skip
    server.start(cpus=SERVER_CPUS)
    server.wait_http("/.well-known/openwop", headers=PROXY)
    return server


DEFAULT_NAME = "ours (make run default)"
DEFAULT_VAR = VAR / "default-host"
_DEFAULT_SECRET = secrets.token_urlsafe(50)


def default_env(port: int) -> dict[str, str]:
    """The host as `make run` starts it (issue 35): its development .env (DEBUG on, a generated
    secret), no DATABASE_URL (the embedded PostgreSQL under its var folder), no REDIS_URL (the
    filesystem broker, the in-memory channel layer), no pool, the Makefile's OPENWOP_PUBLIC_URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(
        DJANGO_DEBUG="1",
        DJANGO_SECRET_KEY=_DEFAULT_SECRET,
        OPENWOP_VAR_DIR=str(DEFAULT_VAR),
        OPENWOP_ENV_FILE=str(DEFAULT_VAR / "no.env"),  # this checkout's own .env must not leak in
        OPENWOP_PUBLIC_URL=f"http://127.0.0.1:{port}",
        DJANGO_LOG_LEVEL="WARNING",
    )
    for name in ("DATABASE_POOL_MAX_SIZE", "OPENWOP_MAX_STREAMS_PER_KEY"):
        env.pop(name, None)
    # As for the production target: the per-key request limit runs (its counter is part of every
    # request's cost) but out of reach, or one bench key meets the default 1,200 a minute at once.
    env["OPENWOP_RATE_LIMIT_REQUESTS"] = "1000000000"
    env["OPENWOP_TENANT_REQUESTS_PER_MINUTE"] = "1000000000"  # and the tenant's, as above
    return env


def start_default_host() -> tuple[list[Server], str]:
    """The `make run` host: the embedded PostgreSQL (held by a process of its own, unpinned like the
    machine's PostgreSQL the other targets use), migrated and seeded, a worker and uvicorn as the
    Makefile starts them, pinned like every server. Returns its servers and a key."""
    DEFAULT_VAR.mkdir(parents=True, exist_ok=True)
    env0 = default_env(0)
    holder = Server(name="default-pg", cmd=[sys.executable, "-m", "openwop_host.embedded_postgres", "hold"],
                    env=env0, cwd=ROOT, log=VAR / "logs" / "default-pg.log")  # fmt: skip
    holder.log.parent.mkdir(parents=True, exist_ok=True)
    holder.proc = subprocess.Popen(holder.cmd, cwd=ROOT, env=env0, stdout=holder.log.open("ab"),
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    for _ in range(600):
        if "held until stopped" in holder.tail():
            break
        if holder.proc.poll() is not None:
            raise RuntimeError(f"the embedded PostgreSQL did not start:\n{holder.tail()}")
        time.sleep(0.2)
    for args in (("migrate", "--noinput", "-v", "0"), ("seed_demo",)):
        subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env0, check=True, capture_output=True)
    key = subprocess.run(
        [sys.executable, "manage.py", "create_api_key", "--tenant", "demo"], cwd=ROOT, env=env0, check=True,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    worker = Server(
        name="default-celery",
        cmd=[str(VENV_BIN / "celery"), "-A", "openwop_host", "worker", "--pool", "threads", "--concurrency", "16",
             "--loglevel", "warning"],
        env=env0, cwd=ROOT, log=VAR / "logs" / "default-celery.log",
    )  # fmt: skip
    worker.start(cpus=SERVER_CPUS)
    port = free_port()
    web = Server(
        name="default-web",
        cmd=[str(VENV_BIN / "uvicorn"), "openwop_host.asgi:application", "--host", "127.0.0.1", "--port", str(port),
             "--loop", "uvloop", "--http", "httptools", "--lifespan", "off", "--no-proxy-headers"],
        env=default_env(port), cwd=ROOT, log=VAR / "logs" / "default-web.log", port=port,
    )  # fmt: skip
    web.start(cpus=SERVER_CPUS)
    web.wait_http("/.well-known/openwop")
    return [holder, worker, web], key


def start_peer(module: str, name: str, env: dict[str, str], workers: int) -> Server:
    port = free_port()
    penv = dict(os.environ)
    penv.update(env, BENCH_PEER_PORT=str(port))
    server = Server(
        name=name,
        cmd=[str(PEER_VENV / "bin" / "uvicorn"), "--factory", f"peers.{module}:app_factory", "--host", "127.0.0.1",
             "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning"],
        env=penv, cwd=BENCH, log=VAR / "logs" / f"{name}.log", port=port,
    )  # fmt: skip
    server.start(cpus=SERVER_CPUS)
    # A first start on a fresh peer database saves the listpage tasks one by one (~30 s on a busy
    # 2-vCPU machine, more with several workers racing) before it serves.
    path = "/.well-known/agent-card.json" if module == "a2a_reference" else "/"
    server.wait_http(path, timeout=240.0 if int(env.get("BENCH_LIST_TASKS", "0")) > 0 else 60.0)
    return server


def post_json(url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


# ---------------------------------------------------------------------------------------------
# Loads


def a2a_headers(key: str | None) -> dict[str, str]:
    headers = {"A2A-Version": A2A_VERSION, **PROXY}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def gettask_load(base: str, task_id: str, key: str | None, *, version: bool = True) -> Load:
    headers = a2a_headers(key)
    if not version:
        del headers["A2A-Version"]
    body = json.dumps({"jsonrpc": "2.0", "id": "{{N}}", "method": "GetTask", "params": {"id": task_id}})
    return Load(url=f"{base}/a2a/jsonrpc", body=body, headers=headers, ok_marker="TASK_STATE_COMPLETED")


# In a ListTasks result only while more pages follow: an error, an empty tenant or a short one
# (no seed) fails it. Both servers spell it so; their JSON spacing differs ("tasks": [ vs "tasks":[).
LIST_PAGE_MARKER = '"nextPageToken"'


def listpage_load(base: str, key: str | None) -> Load:
    """ListTasks, one page of LIST_PAGE_SIZE from a tenant of LIST_PAGE_TASKS tasks (its total
    counted by each server its own way); a good answer is a page with more to follow."""
    body = json.dumps({"jsonrpc": "2.0", "id": "{{N}}", "method": "ListTasks", "params": {"pageSize": LIST_PAGE_SIZE}})
    return Load(url=f"{base}/a2a/jsonrpc", body=body, headers=a2a_headers(key), ok_marker=LIST_PAGE_MARKER)


def card_load(base: str) -> Load:
    """GET the public agent card (no credential)."""
    return Load(
        url=f"{base}/.well-known/agent-card.json", body="", headers=dict(PROXY), ok_marker='"skills"', method="GET"
    )


_LIST_PAGE_SEED = """
import sys
sys.path.insert(0, "bench")
from listtasks_scale import fill
from apps.tenants.services import api_key_create, tenant_get_or_create
fill("bench-page", {size})
tenant, _ = tenant_get_or_create(slug="bench-page")
print(api_key_create(tenant=tenant, kind="user", label="bench listpage")[1])
"""


def sendmessage_load(base: str, key: str | None) -> Load:
    message = {"role": "ROLE_USER", "messageId": "bench-{{N}}", "parts": [{"text": "ping"}]}
    if key:  # ours: route to the no-op fixture workflow
        message["metadata"] = {"openwop": {"skillId": "conformance-noop"}}
    body = json.dumps({"jsonrpc": "2.0", "id": "{{N}}", "method": "SendMessage", "params": {"message": message}})
    return Load(url=f"{base}/a2a/jsonrpc", body=body, headers=a2a_headers(key), ok_marker="TASK_STATE_COMPLETED")


def mcp_load(base: str, tool: str, key: str | None) -> Load:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = json.dumps(
        {"jsonrpc": "2.0", "id": "{{N}}", "method": "tools/call",
         "params": {"name": tool, "arguments": {}, "_meta": meta}}
    )  # fmt: skip
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        **PROXY,
    }
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return Load(url=f"{base}/mcp", body=body, headers=headers, ok_marker='"isError":false')


# ---------------------------------------------------------------------------------------------
# Measuring


Point = tuple[str, Load, list[Server]]  # (target, load, the target's server processes)


class Bench:
    def __init__(self, *, seconds: float, warmup: float, repeats: int) -> None:
        self.seconds = seconds
        self.warmup = warmup
        self.repeats = repeats
        self.rows: list[dict[str, Any]] = []

    def sample(self, load: Load, servers: list[Server], connections: int,
               seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
        """One warm-up and one measured wrk run (`seconds`, by default the bench's) against one target."""
        threads = 1 if connections < 8 else 2
        run_wrk(load, connections=connections, seconds=self.warmup, threads=threads, cpus=GEN_CPUS)
        # The statistics autovacuum keeps (`_settle`), now that the warm-up has written its rows: a
        # write scenario on a fresh database otherwise runs on plans made for empty tables (MCP
        # tools/call fell from 850 to 680 req/s, PostgreSQL at 87 % seq-scanning runs_run, s13).
        _settle()
        infra = InfraCpu()
        cpu_before = sum(s.cpu_seconds() for s in servers)
        infra.start()
        result = run_wrk(load, connections=connections, seconds=seconds or self.seconds, threads=threads, cpus=GEN_CPUS)
        cpu_used = sum(s.cpu_seconds() for s in servers) - cpu_before
        infra_used = infra.seconds()
        rss = {pid: mb for s in servers for pid, mb in s.rss_mb().items() if mb > 0}
        return {
            **result,
            "server_cpu_pct": round(100 * cpu_used / result["wall_s"], 1),
            "infra_cpu_pct": round(100 * infra_used / result["wall_s"], 1),
            "server_max_rss_mb": round(max(rss.values()), 1) if rss else 0.0,
        }

    def point(self, scenario: str, connections: int, targets: list[Point],
              around: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] | None = None,
              **extra: Any) -> None:  # fmt: skip
        """Every target `self.repeats` times, taking turns; one row per target of the medians.
        `around[target]()`: what each sample of that target is taken inside (another tenant's load)."""
        samples: dict[str, list[dict[str, Any]]] = {target: [] for target, _, _ in targets}
        for _ in range(self.repeats):
            for target, load, servers in targets:
                with (around or {}).get(target, contextlib.nullcontext)():
                    samples[target].append(self.sample(load, servers, connections))
        for target, _, _ in targets:
            row = {**combine(samples[target]), "scenario": scenario, "target": target, "connections": connections,
                   **extra}  # fmt: skip
            self.rows.append(row)
            runs = "/".join(f"{r:.0f}" for r in row["rps_runs"])
            print(
                f"  {scenario:12} {target:22} c={connections:<3} {row['rps']:>8.1f} req/s ({runs})"
                f"  p50 {row['p50_ms']:>7.2f} ms  p99 {row['p99_ms']:>7.2f} ms"
                f"  bad {row['bad'] + row['socket_errors']:>4}"
                f"  server cpu {row['server_cpu_pct']:>5.1f}%  pg+redis {row['infra_cpu_pct']:>5.1f}%"
                f"  wrk cpu {row['generator_cpu_pct']:>5.1f}%",
                flush=True,
            )


def list_total(base: str, key: str | None) -> int:
    """The size of the listing a ListTasks page is taken from, as the server itself counts it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 1}}
    answer = post_json(f"{base}/a2a/jsonrpc", body, a2a_headers(key))
    return int(answer["result"]["totalSize"])


def create_task(base: str, key: str) -> str:
    """A completed task via a real SendMessage on the no-op workflow (GetTask's subject)."""
    load = sendmessage_load(base, key)
    body = json.loads(load.body.replace("{{N}}", secrets.token_hex(8)))
    answer = post_json(load.url, body, load.headers)
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
    return str(task["id"])


def run(args: argparse.Namespace) -> Path:
    VAR.mkdir(parents=True, exist_ok=True)
    if {"gettask", "listpage", "card", "sendmessage", "mcp", "asgi"} & set(args.scenarios):  # the peers run
        _ensure_peer_venv()
    _ensure_database(DATABASE_URL)
    _reset_database(PEER_DATABASE_URL)
    print(f"migrating {DATABASE_URL.rsplit('/', 1)[1]}", flush=True)
    manage("migrate", "--noinput", "-v", "0")
    _analyze(DATABASE_URL)
    _analyze(PEER_DATABASE_URL)
    keys = manage("shell", "-v", "0", "-c", _MAKE_KEYS).splitlines()[-1].split()  # 16 Subjects, one process
    key = keys[0]
    bench = Bench(seconds=args.seconds, warmup=args.warmup, repeats=args.repeats)
    peer_task_id = f"bench-{secrets.token_hex(6)}"
    peer_pg_dsn = PEER_DATABASE_URL.replace("postgres://", "postgresql+asyncpg://", 1)
    started: list[Server] = []
    meta_extra: dict[str, Any] = {}
    try:
        worker = start_worker()
        started.append(worker)
        ours = start_host(RECOMMENDED, WORKERS)
        started.append(ours)
        base = f"http://127.0.0.1:{ours.port}"
        task_id = create_task(base, key)
        ours_servers = [ours, worker]
        ours_name = f"ours ({RECOMMENDED} x{WORKERS})"
        default_targets: list[Point] = []
        if "gettask" in args.scenarios:
            default_servers, default_key = start_default_host()
            started.extend(default_servers)
            default_base = f"http://127.0.0.1:{default_servers[-1].port}"
            default_task = create_task(default_base, default_key)
            # Its CPU: the web process and the worker (the held PostgreSQL counts as pg+redis).
            default_load = gettask_load(default_base, default_task, default_key)
            default_targets = [(DEFAULT_NAME, default_load, default_servers[1:])]
        peers: dict[str, Server] = {}
        if {"gettask", "listpage", "card", "sendmessage", "asgi"} & set(args.scenarios):
            for store in ("postgres", "memory"):
                peers[f"a2a-sdk {store}"] = start_peer(
                    "a2a_reference", f"a2a-sdk-{store}",
                    {"BENCH_A2A_STORE": store, "BENCH_PG_DSN": peer_pg_dsn, "BENCH_TASK_ID": peer_task_id,
                     "BENCH_LIST_TASKS": str(LIST_PAGE_TASKS) if "listpage" in args.scenarios else "0"},
                    WORKERS,
                )  # fmt: skip
                started.append(peers[f"a2a-sdk {store}"])

        def peer_base(name: str) -> str:
            return f"http://127.0.0.1:{peers[name].port}"

        if "gettask" in args.scenarios:
            print("scenario gettask", flush=True)
            _settle()
            for c in args.concurrency:
                bench.point("gettask", c, [(ours_name, gettask_load(base, task_id, key), ours_servers)] + [
                    (name, gettask_load(peer_base(name), peer_task_id, None), [peers[name]])
                    for name in ("a2a-sdk postgres", "a2a-sdk memory")
                ] + default_targets)  # fmt: skip
        # The two reads issue 13 added: quick runs measure them at c = 16 and 64 (its targets) and
        # against the durable peer only (the targets'; the card never touches the store anyway).
        levels = [c for c in args.concurrency if c > 1] if args.quick else args.concurrency
        read_peers = ("a2a-sdk postgres",) if args.quick else ("a2a-sdk postgres", "a2a-sdk memory")
        if "listpage" in args.scenarios:
            print(f"scenario listpage (ListTasks pageSize {LIST_PAGE_SIZE} of {LIST_PAGE_TASKS} tasks)", flush=True)
            page_key = manage("shell", "-v", "0", "-c", _LIST_PAGE_SEED.format(size=LIST_PAGE_TASKS)).split()[-1]
            # Both stores were just seeded (ours here, the peer's at its start): statistics first,
            # or a fresh database plans the page as a sort of the whole tenant (42 ms, not 1).
            _analyze(DATABASE_URL)
            _analyze(PEER_DATABASE_URL)
            list_counts = {ours_name: list_total(base, page_key)}
            list_counts.update({name: list_total(peer_base(name), None) for name in read_peers})
            meta_extra["list_counts"] = list_counts
            print(f"  listed tasks per target: {list_counts}", flush=True)
            if len(set(list_counts.values())) != 1:
                raise RuntimeError(f"ListTasks would compare unequal data: {list_counts}")
            for c in levels:
                bench.point("listpage", c, [(ours_name, listpage_load(base, page_key), ours_servers)] + [
                    (name, listpage_load(peer_base(name), None), [peers[name]]) for name in read_peers
                ])  # fmt: skip
        if "card" in args.scenarios:
            print("scenario card (GET /.well-known/agent-card.json)", flush=True)
            _settle()
            for c in levels:
                bench.point("card", c, [(ours_name, card_load(base), ours_servers)] + [
                    (name, card_load(peer_base(name)), [peers[name]]) for name in read_peers
                ])  # fmt: skip
        if "sendmessage" in args.scenarios:
            print("scenario sendmessage", flush=True)
            _settle()
            # --quick: the durable peer only (the target is against it); the full run adds memory.
            send_peers = ("a2a-sdk postgres",) if args.quick else ("a2a-sdk postgres", "a2a-sdk memory")
            for c in args.concurrency:
                bench.point("sendmessage", c, [(ours_name, sendmessage_load(base, key), ours_servers)] + [
                    (name, sendmessage_load(peer_base(name), None), [peers[name]]) for name in send_peers
                ])  # fmt: skip
        if "mcp" in args.scenarios:
            print("scenario mcp", flush=True)
            _settle()
            mcp_peer = start_peer("mcp_reference", "mcp-sdk", {}, WORKERS)
            started.append(mcp_peer)
            mcp_base = f"http://127.0.0.1:{mcp_peer.port}"
            for c in args.concurrency:
                bench.point("mcp", c, [
                    (ours_name, mcp_load(base, "conformance-noop", key), ours_servers),
                    ("mcp-sdk MCPServer", mcp_load(mcp_base, "noop", None), [mcp_peer]),
                ])  # fmt: skip
        if "negotiation" in args.scenarios:
            print("scenario negotiation", flush=True)
            _settle()
            levels = [16] if args.quick else [c for c in args.concurrency if c > 1]
            _negotiation(bench, base, task_id, keys, ours_servers, ours_name, levels)
            bench.rows.append(_negotiation_inproc(keys[1], task_id, n=100 if args.quick else 500))
        if "retention" in args.scenarios:  # issue 36: GetTask while the retention job runs; the chain's cost
            print("scenario retention (bench/retention_load.py)", flush=True)
            _settle()
            retention_load.scenario(bench, retention_load.Host(
                name=ours_name, base=base, keys=keys, servers=ours_servers, env=host_env(0),
                load=lambda b, k: gettask_load(b, task_id, k),
                start_nochain=lambda: start_host(
                    RECOMMENDED, WORKERS, DJANGO_SETTINGS_MODULE=retention_load.NOCHAIN_SETTINGS
                ),
                analyze=lambda: _analyze(DATABASE_URL), database_url=DATABASE_URL, gen_cpus=GEN_CPUS,
                server_cpus=SERVER_CPUS,
            ), records=args.retention_records, runs=args.retention_runs, archive=args.retention_archive)  # fmt: skip
        if "sse" in args.scenarios:  # before "asgi", which stops `ours`
            print("scenario sse (bench/sse_fanout.py)", flush=True)
            bench.rows.extend(sse_fanout.fanout_rows([100, 1000], port=ours.port, keys=keys, env=host_env(ours.port),
                gen_cpus=GEN_CPUS, events=50, interval=0.1, servers=ours_servers))  # fmt: skip
        if "asgi" in args.scenarios:
            print("scenario asgi", flush=True)
            ours.stop()
            started.remove(ours)
            _asgi(bench, task_id, key, worker, args.concurrency)
        if "listtasks" in args.scenarios:
            print("scenario listtasks (bench/listtasks_scale.py)", flush=True)
            bench.rows.append(_listtasks(args.listtasks_sizes, args.listtasks_others))
        if "fairness" in args.scenarios:  # issue 49: tenant B alone and beside tenant A's bursts
            print("scenario fairness (bench/fairness.py)", flush=True)
            _settle()
            fair = start_host(RECOMMENDED, WORKERS, **fairness.HOST_ENV)
            started.append(fair)
            beat = start_beat()
            started.append(beat)
            fairness.scenario(bench, fairness.Host(
                base=f"http://127.0.0.1:{fair.port}", servers=[fair, worker, beat], env=host_env(0),
                database_url=DATABASE_URL, redis_url=REDIS_URL, queue=host_env(0)["OPENWOP_CELERY_QUEUE"],
                gen_cpus=GEN_CPUS, gettask=gettask_load, headers=a2a_headers, create_task=create_task, manage=manage,
            ), wait_s=fairness.WAIT_QUICK_S if args.quick else fairness.WAIT_FULL_S)  # fmt: skip
        if args.push:
            print("scenario push (bench/push_isolation.py)", flush=True)
            bench.rows.extend(_push())
    finally:
        for server in reversed(started):
            server.stop()
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["bench/run.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_avg_at_end": os.getloadavg()},
        "server_cpus": SERVER_CPUS, "generator_cpus": GEN_CPUS, "ours": ours_name,
        "seconds": args.seconds, "warmup": args.warmup, "repeats": args.repeats,
        "postgres": postgres_meta(DATABASE_URL), "redis": redis_meta(REDIS_URL), **meta_extra,
    }  # fmt: skip
    return report.write(meta, bench.rows, BENCH / "results", name=args.name)


def _negotiation(
    bench: Bench, base: str, task_id: str, keys: list[str], servers: list[Server], ours_name: str, levels: list[int]
) -> None:
    """What negotiation + its record costs: GetTask with the header, without it (the decision still
    runs and is still recorded: no bypass exists), and spread over 16 keys of the same tenant (16
    Subjects, 16 host-event streams) to show the per-Subject sequence lock the record takes."""
    for c in levels:
        multi = gettask_load(base, task_id, "{{KEY}}")
        multi = Load(
            url=multi.url, body=multi.body, headers=multi.headers, ok_marker=multi.ok_marker, rotate=tuple(keys)
        )
        bench.point("negotiation", c, [
            (f"{ours_name} A2A-Version", gettask_load(base, task_id, keys[0]), servers),
            (f"{ours_name} no header", gettask_load(base, task_id, keys[0], version=False), servers),
            (f"{ours_name} 16 subjects", multi, servers),
        ])  # fmt: skip


def _negotiation_inproc(key: str, task_id: str, *, n: int) -> dict[str, Any]:
    """bench/negotiation_cost.py: each step of GetTask timed alone, with its SQL count."""
    out = subprocess.run(
        [sys.executable, str(BENCH / "negotiation_cost.py"), "--key", key, "--task", task_id, "--n", str(n)],
        cwd=ROOT, env=host_env(0), capture_output=True, text=True,
    )  # fmt: skip
    text = out.stdout if out.returncode == 0 else out.stderr[-2000:]
    target = "in-process steps (bench/negotiation_cost.py)"
    return {"scenario": "negotiation", "target": target, "connections": 1, "stdout": text, "returncode": out.returncode}


def _listtasks(sizes: str, others: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(BENCH / "listtasks_scale.py"), "--sizes", sizes, "--other-tenants", str(others)],
        cwd=ROOT, env=host_env(0), capture_output=True, text=True,
    )  # fmt: skip
    text = out.stdout if out.returncode == 0 else out.stderr[-2000:]
    return {"scenario": "listtasks", "target": f"task_page at {sizes} runs/tenant", "connections": 1,
            "stdout": text, "returncode": out.returncode}  # fmt: skip


def _asgi(bench: Bench, task_id: str, key: str, worker: Server, concurrency: list[int]) -> None:
    """The servers we could ship, on GetTask; plus the recommended one without the connection pool
    (DATABASE_POOL_MAX_SIZE=0: a new PostgreSQL connection per request, the default before)."""
    variants = [("daphne", 1, "8"), ("uvicorn", 1, "8"), ("uvicorn", 2, "8"), ("gunicorn", 2, "8"), ("uvicorn", 2, "0")]
    for variant, workers, pool in variants:
        server = start_host(variant, workers, DATABASE_POOL_MAX_SIZE=pool)
        label = f"{variant} x{workers}" + ("" if pool != "0" else " no pool")
        try:
            base = f"http://127.0.0.1:{server.port}"
            for c in concurrency:
                bench.point("asgi", c, [(label, gettask_load(base, task_id, key), [server, worker])])
        finally:
            server.stop()


def _push() -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, str(BENCH / "push_isolation.py")], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "DJANGO_DEBUG": "1"},
    )  # fmt: skip
    return [{"scenario": "push", "target": "push_isolation.py", "connections": 0, "stdout": out.stdout[-4000:],
             "returncode": out.returncode}]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the under-3-minute subset")
    parser.add_argument("--scenarios", help=f"comma list of {','.join(SCENARIOS)}")
    parser.add_argument("--seconds", type=float, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per point")
    parser.add_argument("--repeats", type=int, help="measurements per point, interleaved (3 quick, 5 full)")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    parser.add_argument("--push", action="store_true", help="also run bench/push_isolation.py")
    parser.add_argument("--listtasks-sizes", default="10000,100000", help="runs per tenant (1000000 takes long)")
    parser.add_argument("--listtasks-others", type=int, default=10, help="other tenants of the same size")
    parser.add_argument("--retention-records", type=int, default=1_000_000, help="retention: records to drop")
    parser.add_argument("--retention-runs", type=int, default=100_000, help="retention: terminal runs expired")
    parser.add_argument("--retention-archive", action="store_true", help="retention: export before expiry (file://)")
    parser.add_argument("--name", help="results file stem (default: the UTC date and time)")
    args = parser.parse_args()
    preset = QUICK if args.quick else FULL
    args.scenarios = tuple(args.scenarios.split(",")) if args.scenarios else preset["scenarios"]
    args.seconds = args.seconds or preset["seconds"]
    args.warmup = args.warmup or preset["warmup"]
    args.repeats = args.repeats or preset["repeats"]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    path = run(args)
    print(f"results: {path} (+ .md, .png)")


if __name__ == "__main__":
    main()
