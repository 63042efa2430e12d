"""Prometheus metrics: what an operator of many tenants asks first — is it healthy, who
is calling, what fails. `GET /metrics` renders them (`metrics_view`).

- **Names** start with `openwop_`. **Labels** are bounded and carry no tenant, key, token or URL:
  the door (`rest`, `a2a`, `mcp`), an operation from a fixed list (anything else is `other`), an
  outcome, a protocol version from the host's own offer.
- **Several processes** (web processes, Celery workers): set `PROMETHEUS_MULTIPROC_DIR` to an empty
  directory every process of the host shares (cleared before they start) and every process
  writes its samples there; `/metrics` in any web process then sums them (prometheus-client's
  multiprocess mode). Without it each process reports its own (one web process, `make run`).
  Gauges read at scrape time (database pools, the oldest pending delivery) are the scraping
  process's own reading, not summed.
- **Who may read**: loopback only by default; `OPENWOP_METRICS_ALLOW_CIDRS` (comma list of
  networks) replaces that list. Anyone else gets the host's 404 for an unknown path: the
  endpoint does not exist for them.

Recording costs a dictionary lookup and an addition per call (no I/O, no lock held across I/O).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar, Token
from functools import cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from apps.core.errors import NotFound
from apps.core.hybrid_middleware import HybridMiddleware
from apps.core.logformat import log_bind, log_scope, log_scope_end
from apps.core.protocol import is_protocol_path

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter(
    "openwop_requests_total", "Requests answered, by door, operation and outcome.", ["door", "operation", "outcome"]
)
REQUEST_SECONDS = Histogram(
    "openwop_request_duration_seconds",
    "Time from a request's arrival to its answer's end (a stream: to its close), by door and operation.",
    ["door", "operation"],
    buckets=_LATENCY_BUCKETS,
)
NEGOTIATIONS = Counter(
    "openwop_negotiation_decided_total",
    "negotiation.decided records, by protocol, outcome and the version agreed (none when refused).",
    ["protocol", "outcome", "version"],
)
RUNS_STARTED = Counter(
    "openwop_runs_started_total", "Runs started (committed run.started), by transport.", ["transport"]
)
RUNS_FINISHED = Counter(
    "openwop_runs_finished_total", "Runs that reached a terminal state (committed), by status and transport.",
    ["status", "transport"],
)  # fmt: skip
PUSH_ATTEMPTS = Counter(
    "openwop_push_attempts_total",
    "Push and webhook delivery attempts, by result: delivered, retry (failed, tried again later) or dead "
    "(failed for the last time: a dead letter).",
    ["result"],
)
PUSH_DEAD_LETTERED = Counter(
    "openwop_push_dead_lettered_total",
    "Push and webhook deliveries dead-lettered without an attempt, by reason: credential_unopenable (no "
    "key opens its credential), credential_discarded, attempt_lost.",
    ["reason"],
)
# OPENWOP_METRICS_TENANT_LABELS=1: the same counts again per tenant (its slug), in families of their
# own (`openwop_tenant_*`), so the default ones never carry a tenant and their series stay few.
TENANT_REQUESTS = Counter(
    "openwop_tenant_requests_total", "Requests answered, per tenant (opt-in), by door and outcome.",
    ["tenant", "door", "outcome"],
)  # fmt: skip
TENANT_NEGOTIATIONS = Counter(
    "openwop_tenant_negotiation_decided_total", "negotiation.decided records per tenant (opt-in).",
    ["tenant", "protocol", "outcome", "version"],
)  # fmt: skip
TENANT_RUNS_STARTED = Counter(
    "openwop_tenant_runs_started_total", "Runs started per tenant (opt-in).", ["tenant", "transport"]
)
TENANT_RUNS_FINISHED = Counter(
    "openwop_tenant_runs_finished_total", "Runs finished per tenant (opt-in).", ["tenant", "status", "transport"]
)
# Tenant budgets (apps/tenants/budgets.py, apps/core/request_limits.py): refusals by budget, and per
# tenant (its slug, the [A-Za-z0-9._-] grammar: nothing to escape) in TENANT_BUDGET_REFUSALS below,
# always on: which tenant is refused is what an operator must see (issue 49 item 2); its labels are
# bounded by tenants x budgets, not by requests.
BUDGET_REFUSALS = Counter(
    "openwop_budget_refusals_total",
    "Requests refused past a tenant budget, by budget (runs_per_minute, runs_queued, api_keys, ...).",
    ["budget"],
)
SIGN_INS = Counter(
    "openwop_sign_ins_total",
    "Password sign-ins by door (admin, console) and outcome: ok, failed, throttled (refused without "
    "checking the password: that username from that address) or delayed (refused: that username's turn).",
    ["door", "outcome"],
)
TENANT_BUDGET_REFUSALS = Counter(
    "openwop_tenant_budget_refusals_total",
    "Requests refused for a tenant or host budget (apps/core/request_limits.py, the runs' budgets), "
    "by tenant (its slug; empty when unknown) and budget.",
    ["tenant", "budget"],
)
SSE_STREAMS = Gauge("openwop_sse_streams_open", "Server-sent event streams open now.", multiprocess_mode="livesum")
FAIR_TURNS_WAITING = Gauge(
    "openwop_fair_turns_waiting",
    "A2A, MCP and REST requests waiting now for their tenant's turn (apps/core/fair_turns.py, OPENWOP_FAIR_SLOTS).",
    multiprocess_mode="livesum",
)

# Bounded operation names per door: a label value outside these is `other`.
A2A_OPERATIONS = frozenset({
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard", "GetAgentCard",
})  # fmt: skip
MCP_OPERATIONS = frozenset({
    "initialize", "ping", "server/discover", "tools/list", "tools/call", "resources/list", "resources/read",
    "resources/templates/list", "prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
    "tasks/get", "tasks/list", "tasks/cancel", "tasks/result", "GET", "DELETE",
})  # fmt: skip
TERMINAL_STATUSES = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}


def bounded(operation: str, known: frozenset[str]) -> str:
    return operation if operation in known else "other"


_JSONRPC_CODE = re.compile(rb'"error"\s*:\s*\{[^{}]*?"code"\s*:\s*(-?\d+)')
# JSON-RPC codes that are the host's fault, not the caller's: internal error (A2A and MCP).
_JSONRPC_SERVER_CODES = frozenset({-32603})


def outcome_of(status: int, content: bytes | None = None) -> str:
    """`ok`, `client_error` (4xx, or a JSON-RPC error answered with 200 that refuses the caller:
    not found, invalid params, a version or rate refusal), `server_error` (5xx, or a JSON-RPC
    internal error, -32603: a fault an operator must look at, issue 51 item 3), `error` (a JSON-RPC
    error whose code is not in the first bytes)."""
    if status >= 500:
        return "server_error"
    if status >= 400:
        return "client_error"
    if content:
        head = content[:200]
        error_at, result_at = head.find(b'"error"'), head.find(b'"result"')
        if error_at >= 0 and (result_at < 0 or error_at < result_at) and head.lstrip().startswith(b'{"jsonrpc"'):
            code = _JSONRPC_CODE.search(head, error_at)
            if code is None:
                return "error"
            return "server_error" if int(code.group(1)) in _JSONRPC_SERVER_CODES else "client_error"
    return "ok"


# The tenant of the request being served (set where a bearer key resolves to its Subject): the
# per-tenant families' label, read only when the operator turned them on.
_caller_tenant: ContextVar[str | None] = ContextVar("openwop_caller_tenant", default=None)


def tenant_labels_on() -> bool:
    return bool(getattr(settings, "OPENWOP_METRICS_TENANT_LABELS", False))


def caller_tenant_seen(subject: Any) -> Any:
    """Note the authenticated caller's tenant for this request's metrics and its log lines (the
    request's log scope); returns `subject`."""
    _caller_tenant.set(subject.tenant)
    log_bind(tenant=subject.tenant)
    return subject


def tenant_budget_refused(tenant: str, budget: str) -> None:
    """One refusal for `budget` (e.g. tenant_requests_per_minute) of `tenant` (a slug)."""
    budget_refused(budget, tenant)


class Begun:
    """What `request_begun` set, for `reset_caller` to put back."""

    __slots__ = ("caller", "scope")

    def __init__(self, caller: Token[str | None], scope: Token[dict[str, str] | None]) -> None:
        self.caller, self.scope = caller, scope


def request_begun(**log_fields: object) -> Begun:
    """A request starts with no caller known (its context may be reused: a keep-alive task), and a
    log scope of its own (apps/core/logformat.py): its lines name the tenant once the key resolves,
    and whatever else the door binds (`log_fields`, e.g. the operation)."""
    return Begun(_caller_tenant.set(None), log_scope(**log_fields))


def reset_caller(token: Begun) -> None:
    _caller_tenant.reset(token.caller)
    log_scope_end(token.scope)


def request_observed(door: str, operation: str, outcome: str, started: float) -> None:
    REQUESTS.labels(door, operation, outcome).inc()
    REQUEST_SECONDS.labels(door, operation).observe(time.perf_counter() - started)
    if tenant_labels_on():
        tenant = _caller_tenant.get()
        if tenant is not None:
            TENANT_REQUESTS.labels(tenant, door, outcome).inc()


def negotiation_decided(protocol: str, outcome: str, version: str | None, tenant: str | None = None) -> None:
    NEGOTIATIONS.labels(protocol, outcome, version or "none").inc()
    if tenant is not None and tenant_labels_on():
        TENANT_NEGOTIATIONS.labels(tenant, protocol, outcome, version or "none").inc()


def run_events_committed(transport: str, types: list[str], tenant: str | None = None) -> None:
    """The committed events of a run: run.started and a terminal event move the run counters."""
    per_tenant = tenant is not None and tenant_labels_on()
    for event_type in types:
        if event_type == "run.started":
            RUNS_STARTED.labels(transport).inc()
            if per_tenant:
                TENANT_RUNS_STARTED.labels(tenant, transport).inc()
        elif event_type in TERMINAL_STATUSES:
            RUNS_FINISHED.labels(TERMINAL_STATUSES[event_type], transport).inc()
            if per_tenant:
                TENANT_RUNS_FINISHED.labels(tenant, TERMINAL_STATUSES[event_type], transport).inc()


def budget_refused(budget: str, tenant: str | None = None) -> None:
    """One refusal past a budget (a TenantBudget field name, or a request path budget such as
    tenant_requests_per_minute or host_streams), by budget and by tenant (empty when unknown)."""
    BUDGET_REFUSALS.labels(budget).inc()
    TENANT_BUDGET_REFUSALS.labels(tenant=tenant or "", budget=budget).inc()


def push_attempt_settled(result: str) -> None:
    PUSH_ATTEMPTS.labels(result).inc()


def push_dead_lettered(reason: str) -> None:
    PUSH_DEAD_LETTERED.labels(reason).inc()


def sign_in_observed(door: str, outcome: str) -> None:
    SIGN_INS.labels(door, outcome).inc()


class _ScrapeTime(Collector):
    """Readings taken when /metrics is read, in the scraping process: the database pools in use and
    what the apps registered (`on_scrape`)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pools = GaugeMetricFamily(
            "openwop_db_pool_connections",
            "Database connections of this process's pools: in use or idle (pool = django or doors).",
            labels=["pool", "state"],
        )
        for pool, in_use, idle in _pool_readings():
            pools.add_metric([pool, "in_use"], in_use)
            pools.add_metric([pool, "idle"], idle)
        yield pools
        for reading in _scrape_readings:
            try:
                families = list(reading())
            except Exception as exc:  # one reading that cannot be taken (the database away) hides no other
                name = getattr(reading, "__name__", "a reading")
                logger.warning("metrics: %s not read (%s)", name, type(exc).__name__)
                continue
            yield from families


# Readings of the apps built on core, taken at scrape time (apps/push: its backlog): core never
# imports them, they register here in their ready().
_scrape_readings: list[Callable[[], Iterable[GaugeMetricFamily]]] = []


def on_scrape(reading: Callable[[], Iterable[GaugeMetricFamily]]) -> None:
    if reading not in _scrape_readings:
        _scrape_readings.append(reading)


def _pool_readings() -> list[tuple[str, int, int]]:
    """(pool, in use, idle) for Django's pool, if any, and each of the doors' pools."""
    from django.db import connection

    from apps.core.async_db import async_pools_stats

    pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
    named = [("django", pool.get_stats())] if pool is not None else []
    named += [("doors", stats) for stats in async_pools_stats()]
    return [(name, s.get("pool_size", 0) - s.get("pool_available", 0), s.get("pool_available", 0)) for name, s in named]


@cache
def _allowed_networks(spec: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if not spec.strip():
        return (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in spec.split(",") if part.strip())


def metrics_allowed(remote_addr: str | None) -> bool:
    """The peer address is in the allowed networks: the connection's, as the ASGI server reports it
    (from X-Forwarded-For only for a proxy it trusts: docs/operators/proxies-and-balancers.md)."""
    try:
        address = ipaddress.ip_address((remote_addr or "").split("%", 1)[0])
    except ValueError:
        return False
    networks = _allowed_networks(str(getattr(settings, "OPENWOP_METRICS_ALLOW_CIDRS", "") or ""))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def _registry() -> CollectorRegistry:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = CollectorRegistry()
    if directory:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=directory)
    else:
        from prometheus_client import REGISTRY

        registry.register(_Default(REGISTRY))
    registry.register(_ScrapeTime())
    return registry


class _Default(Collector):
    """This process's own metrics (no multiprocess directory)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        yield from self.source.collect()


def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: the exposition text, to allowed addresses; the unknown path's 404 otherwise."""
    if not metrics_allowed(request.META.get("REMOTE_ADDR")):
        raise NotFound(f"No resource at {request.path}.")  # what an unknown path answers
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


_NOT_FOUND_BODY = b'{"error":"not_found","message":"No resource at that path."}'


def _process_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """The WSGI app `metrics_serve` runs: /metrics to allowed addresses, 404 to anything else."""
    if environ.get("PATH_INFO") != "/metrics" or not metrics_allowed(environ.get("REMOTE_ADDR")):
        start_response("404 Not Found", [("Content-Type", "application/json")])
        return [_NOT_FOUND_BODY]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [generate_latest(_process_registry())]


def _process_registry() -> CollectorRegistry:
    """This process's samples (or, with PROMETHEUS_MULTIPROC_DIR, every process's): the counters a
    worker or a gRPC server moves. The scrape-time readings (database, broker) are the web
    process's: the same on every pod, read there once."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = CollectorRegistry()
    if directory:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=directory)
    else:
        from prometheus_client import REGISTRY

        registry.register(_Default(REGISTRY))
    return registry


def metrics_serve(port: int, *, bind: str = "") -> int:
    """Serve GET /metrics on `port` (0: any free one) from a daemon thread, for a process with no
    web server of its own (a Celery worker, grpc_serve; OPENWOP_METRICS_PORT): the same exposition
    and allowlist as the web process's, so the Helm chart's ServiceMonitor scrapes worker and gRPC
    pods too. Returns the bound port."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class _Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is not news

    server: WSGIServer = make_server(bind, port, _process_app, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    bound = int(server.server_address[1])
    logger.info("metrics: GET /metrics served on port %s", bound)
    return bound


def rest_operation(request: HttpRequest) -> str:
    """`<METHOD> <route pattern>` of the URL Django resolved (a finite set), else `other`."""
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None)
    return f"{request.method} {route}" if route else "other"


class MetricsMiddleware(HybridMiddleware):
    """The REST wire's requests (the paths ProtocolEnvelopeMiddleware serves, not /metrics): one
    count by operation and outcome, one latency sample. A2A and MCP are counted by their doors."""

    def _scall(self, request: HttpRequest) -> HttpResponseBase:
        if not _counted_path(request.path):
            return self.sync_next(request)
        started, token = time.perf_counter(), request_begun()
        try:
            response = self.sync_next(request)
            _observe_rest(request, response, started)
        finally:
            reset_caller(token)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if not _counted_path(request.path):
            return await self.async_next(request)
        started, token = time.perf_counter(), request_begun()
        try:
            response = await self.async_next(request)
            _observe_rest(request, response, started)
        finally:
            reset_caller(token)
        return response


def _counted_path(path: str) -> bool:
    return path != "/metrics" and is_protocol_path(path)


def _observe_rest(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    request_observed("rest", rest_operation(request), outcome_of(response.status_code), started)
