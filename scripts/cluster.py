"""`make cluster`: the host as several replicas on one PostgreSQL and one Redis, behind HAProxy.

Two web replicas (uvicorn, as `make run` starts it), two gRPC servers, two Celery workers and one
beat, every one a process of its own in its own process group, behind a real load balancer (HAProxy
from the Debian package): HTTP mode for the web replicas (health-checked on /readyz, no sticky
sessions, long timeouts for SSE) and TCP mode for gRPC (HTTP/2 streams pass through untouched).
The balancer replaces X-Forwarded-For with the client's address and the web replicas believe it
from the balancer's own source address only, so each replica sees the real client; /metrics is
refused at the balancer unless OPENWOP_METRICS_ALLOW_CIDRS names the client's network.

    python scripts/cluster.py start   # or `make cluster`: starts, waits until all answer, exits
    python scripts/cluster.py stop    # or `make cluster-stop`
    python scripts/cluster.py status

Everything lives under var/cluster/ (CLUSTER_DIR): cluster.json (the addresses: {"lb", "web",
"grpc_lb", "grpc", "balancer_source"}), state.json (the pid and start time of every process, so
`stop` only ever signals what `start` started), haproxy.cfg and one log per process. Environment
variables given to `make cluster` reach every process; OPENWOP_PUBLIC_URL is the balancer's URL and OPENWOP_GRPC_URL
the gRPC balancer's address. PROMETHEUS_MULTIPROC_DIR is var/cluster/metrics/ (emptied at each
start) unless given, so one /metrics scrape through the balancer counts what every process did.
Tests use it as a library (tests/cluster/conftest.py): `start()` returns a `Cluster` whose
replicas can be killed and restarted.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/openwop_cluster"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
WEB_REPLICAS = 2
GRPC_REPLICAS = 2
WORKERS = 2
# As `make run` starts uvicorn (bench/README.md §ASGI server), but behind the balancer: the forwarded
# headers are believed from the balancer's own source address only (`--forwarded-allow-ips` below),
# so each replica sees the real client (the sign-in throttle's address, /metrics' allowlist) and a
# client's own X-Forwarded-For is never believed (docs/operators/proxies-and-balancers.md).
WEB_SERVER_ARGS = ["--loop", "uvloop", "--http", "httptools", "--lifespan", "off"]
# The address HAProxy dials the replicas from when the cluster is on IPv4 loopback: not 127.0.0.1,
# so a local client reaching a replica directly (from 127.0.0.1) is not taken for the balancer.
LOOPBACK_BALANCER_SOURCE = "127.0.0.2"


class ClusterError(Exception):
    """A cluster that cannot start (exit status `code`), with a message for the operator."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _bin(name: str) -> str:
    """A console script of this interpreter's environment (the project's .venv)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


# --- prerequisites ---------------------------------------------------------------------------------


def redis_check(url: str, timeout: float = 2.0) -> None:
    """PING the Redis of `url` with a bare socket; ClusterError(code 2) when it does not answer."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ClusterError(f"REDIS_URL must be a redis:// URL (got scheme {parts.scheme!r}).", 2)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if parts.scheme == "rediss":
        return  # TLS: the processes themselves will say if it is unreachable
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            if parts.password:
                user = unquote(parts.username or "default")
                password = unquote(parts.password)
                sock.sendall(_resp("AUTH", user, password))
                sock.recv(256)
            sock.sendall(_resp("PING"))
            reply = sock.recv(256)
    except OSError as exc:
        raise ClusterError(
            f"Redis is unreachable at {host}:{port} ({exc.strerror or exc}). A cluster needs Redis: the "
            "replicas share wake-ups, rate-limit counters and the Celery broker through it. Start one "
            "(e.g. `redis-server --daemonize yes`) or set REDIS_URL.",
            2,
        ) from None
    if not reply.startswith(b"+PONG"):
        raise ClusterError(f"Redis at {host}:{port} did not answer PING: {reply[:80]!r}", 2)


def _resp(*words: str) -> bytes:
    out = [f"*{len(words)}\r\n".encode()]
    for word in words:
        raw = word.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def database_ensure(url: str) -> None:
    """CREATE DATABASE when the one named by `url` is missing (connecting to `postgres` beside it)."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ClusterError("DATABASE_URL names no database.", 2)
    admin = parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError as exc:
        raise ClusterError(f"PostgreSQL of DATABASE_URL is unreachable: {str(exc).strip()}", 2) from None


# --- processes ---------------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (so a recycled pid is never taken for ours)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class Proc:
    """One process of the cluster: its command, log and, once started, its pid."""

    name: str
    args: list[str]
    log: Path
    pid: int | None = None
    started: str | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(  # noqa: S603 (our own commands, no shell)
                self.args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.pid = self.popen.pid
        self.started = _start_time(self.pid)

    def alive(self) -> bool:
        if self.pid is None:
            return False
        if self.popen is not None:
            return self.popen.poll() is None
        return self.started is not None and _start_time(self.pid) == self.started

    def signal(self, sig: int) -> None:
        """`sig` to the process group this module started (the process and any children)."""
        if not self.alive():
            return
        assert self.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen is not None:
                try:
                    self.popen.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    continue
                return True
            if not self.alive():
                return True
            time.sleep(0.1)
        return not self.alive()

    def stop(self, *, kill: bool = False, timeout: float = 15.0) -> None:
        if kill:
            self.signal(signal.SIGKILL)
            self.wait_gone(5)
            return
        self.signal(signal.SIGTERM)
        if not self.wait_gone(timeout):
            self.signal(signal.SIGKILL)
            self.wait_gone(5)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def state(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "started": self.started, "log": str(self.log)}


# --- the cluster -------------------------------------------------------------------------------------


@dataclass
class Cluster:
    """A started cluster: its addresses (cluster.json), environment and processes by name."""

    dir: Path
    env: dict[str, str]
    lb: str
    web: list[str]
    grpc_lb: str
    grpc: list[str]
    procs: dict[str, Proc]
    balancer_source: str = ""  # the address HAProxy dials the web replicas from (they trust only it)

    def info(self) -> dict[str, object]:
        return {"lb": self.lb, "web": self.web, "grpc_lb": self.grpc_lb, "grpc": self.grpc,
                "balancer_source": self.balancer_source}  # fmt: skip

    def save(self) -> None:
        (self.dir / "cluster.json").write_text(json.dumps(self.info(), indent=2) + "\n")
        state = {
            "processes": [p.state() for p in self.procs.values()],
            "args": {n: p.args for n, p in self.procs.items()},
        }
        (self.dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    def start_proc(self, name: str, *, wait: bool = True) -> None:
        """(Re)start one process under its own command, and wait until it answers."""
        proc = self.procs[name]
        proc.start(self.env)
        self.save()
        if wait:
            _wait_ready(self, [name])

    def stop(self) -> None:
        # The balancer last, so replicas drain behind it; beat first, so nothing new is scheduled.
        order = sorted(self.procs.values(), key=lambda p: {"beat": 0, "haproxy": 9}.get(p.name, 5))
        for proc in order:
            proc.signal(signal.SIGTERM)
        for proc in order:
            if not proc.wait_gone(15):
                proc.signal(signal.SIGKILL)
                proc.wait_gone(5)
        (self.dir / "state.json").unlink(missing_ok=True)


def balancer_source(host: str) -> str:
    """The one address the web replicas believe forwarded headers from: HAProxy's source address
    towards them (LOOPBACK_BALANCER_SOURCE on IPv4 loopback or any-address, the host otherwise)."""
    try:
        address = ipaddress.ip_address(socket.gethostbyname(host) if not _is_ip(host) else host.strip("[]"))
    except (OSError, ValueError):
        raise ClusterError(f"CLUSTER_HOST {host!r} is not an address this machine can bind.", 2) from None
    if isinstance(address, ipaddress.IPv4Address) and (address.is_loopback or address.is_unspecified):
        return LOOPBACK_BALANCER_SOURCE
    if address.is_unspecified:
        return "::1"
    return str(address)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def metrics_networks(spec: str) -> list[str]:
    """OPENWOP_METRICS_ALLOW_CIDRS as networks (the balancer lets /metrics through to those only)."""
    try:
        return [str(ipaddress.ip_network(part.strip(), strict=False)) for part in spec.split(",") if part.strip()]
    except ValueError as exc:
        raise ClusterError(f"OPENWOP_METRICS_ALLOW_CIDRS: {exc}", 2) from None


# What the replicas answer for a path they do not serve (and so for /metrics to a caller not allowed).
METRICS_REFUSAL = '{"error":"not_found","message":"No resource at /metrics."}'


def web_frontend_rules(metrics_allowed: list[str]) -> str:
    """The balancer's HTTP rules before any replica sees a request. The replicas believe
    X-Forwarded-For from the balancer only, so it must never pass on what a client claims: the header
    is replaced by the connection's own source address (not appended to, as `option forwardfor`
    does), Forwarded (RFC 7239) is dropped, and X-Forwarded-Proto says what this plain-HTTP listener
    is. /metrics is refused here, with the unknown path's answer, unless the client is in
    OPENWOP_METRICS_ALLOW_CIDRS: every client is on loopback to a replica of this cluster, so the
    replica's own check would let anyone through."""
    allowed = f"\n    acl metrics_client src {' '.join(metrics_allowed)}" if metrics_allowed else ""
    condition = "metrics_path !metrics_client" if metrics_allowed else "metrics_path"
    return f"""    http-request set-header X-Forwarded-For %[src]
    http-request del-header Forwarded
    http-request set-header X-Forwarded-Proto http
    acl metrics_path path,url_dec -i /metrics{allowed}
    http-request return status 404 content-type application/json string '{METRICS_REFUSAL}' if {condition}"""


def _haproxy_config(
    *, host: str, lb_port: int, grpc_lb_port: int, web: list[str], grpc: list[str], dir: Path, source: str,
    metrics_allowed: list[str],
) -> str:  # fmt: skip
    """HAProxy: HTTP round robin over the web replicas (no stickiness: any replica serves any
    request), health-checked on /readyz and redispatched when a replica refuses; gRPC in TCP mode
    (each HTTP/2 connection to one replica, its streams passed through). SSE and gRPC streams stay
    open for as long as clients hold them: long client/server/tunnel timeouts. The web replicas are
    dialled from `source`, the one address they believe X-Forwarded-For from."""
    web_servers = "\n".join(
        f"    server web{i + 1} {urlsplit(url).netloc} check inter 500ms fall 2 rise 2" for i, url in enumerate(web)
    )
    grpc_servers = "\n".join(
        f"    server grpc{i + 1} {addr} check inter 500ms fall 2 rise 2" for i, addr in enumerate(grpc)
    )
    return f"""# Written by scripts/cluster.py (make cluster); regenerated on every start.
global
    maxconn 4096
    stats socket {dir / "haproxy.sock"} mode 600 level admin

defaults
    log stdout format raw local0
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout http-request 30s
    timeout http-keep-alive 30s
    retries 3
    option redispatch

frontend web
    mode http
    bind {host}:{lb_port}
    # Slow clients: the request's headers and its body (buffered before a replica sees it) must
    # arrive within `timeout http-request`; uvicorn has no header-read deadline of its own.
    option http-buffer-request
{web_frontend_rules(metrics_allowed)}
    default_backend web

backend web
    mode http
    balance roundrobin
    # The replicas trust forwarded headers from this address only (uvicorn --forwarded-allow-ips).
    source {source}
    option httpchk GET /readyz?scope=replica
    http-check expect status 200
    # A streaming response (SSE) is passed on as it comes; no buffering, no compression.
    option http-no-delay
{web_servers}

frontend grpc
    mode tcp
    bind {host}:{grpc_lb_port}
    default_backend grpc

backend grpc
    mode tcp
    balance roundrobin
{grpc_servers}
"""


def _plan(cluster_dir: Path, env: dict[str, str], *, host: str, lb_port: int, grpc_lb_port: int) -> Cluster:
    python = sys.executable
    source = balancer_source(host)
    metrics_allowed = metrics_networks(env.get("OPENWOP_METRICS_ALLOW_CIDRS", ""))
    web_ports = [free_port(host) for _ in range(WEB_REPLICAS)]
    grpc_ports = [free_port(host) for _ in range(GRPC_REPLICAS)]
    lb = f"http://{host}:{lb_port}"
    grpc_lb = f"{host}:{grpc_lb_port}"
    procs: dict[str, Proc] = {}
    for i, port in enumerate(web_ports, 1):
        procs[f"web{i}"] = Proc(
            f"web{i}",
            [_bin("uvicorn"), "openwop_host.asgi:application", "--host", host, "--port", str(port), *WEB_SERVER_ARGS,
             "--proxy-headers", "--forwarded-allow-ips", source],
            cluster_dir / f"web{i}.log",
        )  # fmt: skip
    for i, port in enumerate(grpc_ports, 1):
        procs[f"grpc{i}"] = Proc(
            f"grpc{i}",
            [python, "manage.py", "grpc_serve", "--bind", host, "--port", str(port)],
            cluster_dir / f"grpc{i}.log",
        )
    for i in range(1, WORKERS + 1):
        procs[f"worker{i}"] = Proc(
            f"worker{i}",
            [_bin("celery"), "-A", "openwop_host", "worker", "--pool", "threads", "--concurrency", "16",
             "--loglevel", "info", "-n", f"worker{i}@%h-{lb_port}"],
            cluster_dir / f"worker{i}.log",
        )  # fmt: skip
    procs["beat"] = beat_proc(cluster_dir, "beat")
    procs["haproxy"] = Proc(
        "haproxy", ["haproxy", "-f", str(cluster_dir / "haproxy.cfg"), "-db"], cluster_dir / "haproxy.log"
    )
    web = [f"http://{host}:{port}" for port in web_ports]
    grpc = [f"{host}:{port}" for port in grpc_ports]
    env = {**env, "OPENWOP_PUBLIC_URL": env.get("OPENWOP_CLUSTER_PUBLIC_URL") or lb, "OPENWOP_GRPC_ENABLED": "1",
           "OPENWOP_GRPC_URL": env.get("OPENWOP_CLUSTER_GRPC_URL") or grpc_lb}  # fmt: skip
    (cluster_dir / "haproxy.cfg").write_text(
        _haproxy_config(host=host, lb_port=lb_port, grpc_lb_port=grpc_lb_port, web=web, grpc=grpc, dir=cluster_dir,
                        source=source, metrics_allowed=metrics_allowed)
    )  # fmt: skip
    return Cluster(
        dir=cluster_dir, env=env, lb=lb, web=web, grpc_lb=grpc_lb, grpc=grpc, procs=procs, balancer_source=source
    )


def beat_proc(cluster_dir: Path, name: str) -> Proc:
    """A Celery beat with a schedule file of its own (a second one is what a test starts by mistake)."""
    return Proc(
        name,
        [_bin("celery"), "-A", "openwop_host", "beat", "--loglevel", "info",
         "--schedule", str(cluster_dir / f"celerybeat-schedule-{name}")],
        cluster_dir / f"{name}.log",
    )  # fmt: skip


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (http:// of our own replicas)
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tcp_ok(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def _ready(cluster: Cluster, name: str) -> bool:
    proc = cluster.procs[name]
    if name.startswith("web"):
        return _http_ok(cluster.web[int(name[3:]) - 1] + "/readyz")
    if name.startswith("grpc"):
        return "A2A gRPC serving on " in proc.tail(20000)
    if name.startswith("worker"):
        return " ready." in proc.tail(20000)
    if name.startswith("beat"):
        return "beat: Starting..." in proc.tail(20000)
    if name == "haproxy":
        return _http_ok(cluster.lb + "/readyz") and _tcp_ok(cluster.grpc_lb)
    return True


def _wait_ready(cluster: Cluster, names: list[str], timeout: float = 90.0) -> None:
    pending = list(names)
    deadline = time.monotonic() + timeout
    while pending:
        for name in list(pending):
            proc = cluster.procs[name]
            if not proc.alive():
                raise ClusterError(f"{name} exited while starting; log {proc.log}:\n{proc.tail()}")
            if _ready(cluster, name):
                pending.remove(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"not answering after {timeout:.0f} s: {', '.join(pending)}; "
                + "; ".join(f"{n} log {cluster.procs[n].log}:\n{cluster.procs[n].tail(1500)}" for n in pending)
            )
        time.sleep(0.2)


def _stale_procs(cluster_dir: Path) -> list[Proc]:
    try:
        state = json.loads((cluster_dir / "state.json").read_text())
    except (OSError, ValueError):
        return []
    procs = []
    for item in state.get("processes", []):
        if isinstance(item, dict) and isinstance(item.get("pid"), int):
            procs.append(
                Proc(str(item["name"]), [], Path(str(item["log"])), pid=item["pid"], started=item.get("started"))
            )
    return procs


def start(
    *,
    cluster_dir: Path,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    lb_port: int = 8100,
    grpc_lb_port: int = 0,
    seed: bool = True,
) -> Cluster:
    """Check Redis and PostgreSQL, migrate, start every process, wait until all answer.

    Raises ClusterError if a cluster of `cluster_dir` is still running (stale state of a dead one
    is cleaned), Redis is unreachable (code 2), or a process does not come up (everything started
    is stopped again)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    env.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    env.setdefault("PYTHONUNBUFFERED", "1")
    cluster_dir.mkdir(parents=True, exist_ok=True)
    running = [p for p in _stale_procs(cluster_dir) if p.alive()]
    if running:
        raise ClusterError(
            f"a cluster is already running from {cluster_dir} (pids {', '.join(str(p.pid) for p in running)}): "
            "`make cluster-stop` first."
        )
    for stale in ("state.json", "cluster.json", "haproxy.sock"):
        (cluster_dir / stale).unlink(missing_ok=True)
    for log in cluster_dir.glob("*.log"):
        log.unlink()
    for schedule in cluster_dir.glob("celerybeat-schedule-*"):
        schedule.unlink()
    if "PROMETHEUS_MULTIPROC_DIR" not in env:
        # One scrape of either web replica covers every process (web, gRPC, workers, beat): each
        # writes its samples here and /metrics sums them (apps/core/metrics.py). Emptied before
        # they start, as prometheus-client's multiprocess mode needs; one given in the environment
        # is the operator's to manage.
        metrics_dir = cluster_dir / "metrics"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(mode=0o700)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    redis_check(env["REDIS_URL"])
    if shutil.which("haproxy") is None:
        raise ClusterError("haproxy is not installed (Debian: apt-get install haproxy); the cluster runs behind it.", 2)
    database_ensure(env["DATABASE_URL"])
    lb_port = lb_port or free_port(host)
    grpc_lb_port = grpc_lb_port or free_port(host)
    for port in (lb_port, grpc_lb_port):
        if not _port_free(host, port):
            raise ClusterError(f"port {host}:{port} is taken: set CLUSTER_PORT / CLUSTER_GRPC_PORT to free ones.")
    cluster = _plan(cluster_dir, env, host=host, lb_port=lb_port, grpc_lb_port=grpc_lb_port)
    manage = [sys.executable, "manage.py"]
    steps = [[*manage, "migrate", "--noinput", "-v", "0"]]
    if seed:
        steps.append([*manage, "seed_demo"])
    for step in steps:
        done = subprocess.run(step, cwd=ROOT, env=cluster.env, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(step[1:])} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    try:
        for proc in cluster.procs.values():
            proc.start(cluster.env)
        cluster.save()
        _wait_ready(cluster, list(cluster.procs))
    except BaseException:
        cluster.stop()
        raise
    cluster.save()
    return cluster


def stop(cluster_dir: Path) -> int:
    """End every process a `start` of `cluster_dir` recorded; returns how many were running."""
    procs = _stale_procs(cluster_dir)
    running = [p for p in procs if p.alive()]
    for proc in sorted(running, key=lambda p: {"beat": 0, "haproxy": 9}.get(p.name, 5)):
        proc.stop()
    (cluster_dir / "state.json").unlink(missing_ok=True)
    (cluster_dir / "haproxy.sock").unlink(missing_ok=True)
    return len(running)


def _banner(cluster: Cluster, key: str | None) -> str:
    redis = urlsplit(cluster.env["REDIS_URL"])
    database = urlsplit(cluster.env["DATABASE_URL"])
    lines = [
        "",
        "openwop-host cluster is up (HAProxy in front; `make cluster-stop` ends it)",
        f"  balancer    {cluster.lb}   (OPENWOP_PUBLIC_URL; /readyz health-checked, round robin)",
        f"  web         {'  '.join(cluster.web)}",
        f"  gRPC lb     {cluster.grpc_lb}   (OPENWOP_GRPC_URL; TCP)",
        f"  gRPC        {'  '.join(cluster.grpc)}",
        f"  workers     {WORKERS} Celery workers, 1 beat",
        f"  database    {database.hostname}:{database.port or 5432}{database.path}",
        f"  redis       {redis.hostname}:{redis.port or 6379}{redis.path or '/0'}",
        f"  addresses   {cluster.dir / 'cluster.json'}",
        f"  logs        {cluster.dir}/<process>.log",
    ]
    if key:
        lines.append(f"  demo key    {key}   (tenant demo: Authorization: Bearer <key>)")
    return "\n".join([*lines, ""])


def _demo_key(cluster: Cluster) -> str | None:
    path = cluster.dir / "demo-api-key"
    if not path.exists():
        done = subprocess.run(
            [sys.executable, "manage.py", "create_api_key", "--tenant", "demo", "--label", "make cluster demo key"],
            cwd=ROOT, env=cluster.env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return None
        path.write_text(done.stdout.strip() + "\n")
        path.chmod(0o600)
    return path.read_text().strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("command", nargs="?", default="start", choices=["start", "stop", "status"])
    args = parser.parse_args(argv)
    cluster_dir = Path(os.environ.get("CLUSTER_DIR") or ROOT / "var" / "cluster")
    if args.command == "stop":
        count = stop(cluster_dir)
        print(f"cluster stopped ({count} processes ended)" if count else "no cluster was running")
        return 0
    if args.command == "status":
        procs = _stale_procs(cluster_dir)
        for proc in procs:
            print(f"{proc.name:10} pid {proc.pid}  {'running' if proc.alive() else 'gone'}")
        if not procs:
            print("no cluster")
        return 0 if procs and all(p.alive() for p in procs) else 1
    try:
        cluster = start(
            cluster_dir=cluster_dir,
            host=os.environ.get("CLUSTER_HOST", "127.0.0.1"),
            lb_port=(lb_port := int(os.environ.get("CLUSTER_PORT") or 8100)),
            grpc_lb_port=int(os.environ.get("CLUSTER_GRPC_PORT") or (lb_port + 1 if lb_port else 0)),
        )
    except ClusterError as exc:
        print(f"make cluster: {exc}", file=sys.stderr)
        return exc.code
    except ValueError as exc:
        print(f"make cluster: {exc}", file=sys.stderr)
        return 2
    print(_banner(cluster, _demo_key(cluster)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
