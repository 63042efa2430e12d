"""Settings for openwop-host: everything from the environment through one django-environ `env`.

Zero-setup default (no variables): an embedded PostgreSQL server under var/pg, the in-memory
channel layer and a Celery broker on kombu's filesystem transport under var/, so `make run` needs no
server. With DATABASE_URL / REDIS_URL / CELERY_BROKER_URL: that PostgreSQL (psycopg 3),
channels-redis, Celery on Redis.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from apps.core.file_modes import private_folder
from openwop_host import __version__
from openwop_host.loopback_only import is_loopback_host_name

BASE_DIR = Path(__file__).resolve().parent.parent

# A development checkout's `.env` (written by `make setup`, git-ignored: DJANGO_DEBUG=1 and a
# generated DJANGO_SECRET_KEY), so a management command pasted in a second shell behaves as under
# `make run`. Read only when the file exists; real environment variables win over it. Production
# has no such file and still refuses to start without a real secret (below).
_env_file = Path(os.environ.get("OPENWOP_ENV_FILE") or BASE_DIR / ".env")
if _env_file.is_file():
    environ.Env.read_env(_env_file, overwrite=False)

VAR_DIR = Path(environ.Env().str("OPENWOP_VAR_DIR", default=str(BASE_DIR / "var")))
# 0700: what the host keeps there (the embedded PostgreSQL and its password, the demo key, the
# broker's messages, logs) is for this user only (SECURITY.md §Files on disk; apps/core/file_modes.py).
private_folder(VAR_DIR)
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # every process's samples (apps/core/metrics.py): 0700 too
    private_folder(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)

_secret = env.str("DJANGO_SECRET_KEY", default="")
if not _secret:
    if not DEBUG:
        # Production refuses to start with a guessable key.
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off (for development: `make setup` writes a .env)."
        )
    _secret = "django-insecure-development-only-key-" + "0" * 24
SECRET_KEY = _secret
# Rotation (docs/operators/secrets-and-rotation.md): earlier secret keys, comma-separated, newest
# first (default none). Values sealed at rest (apps/core/sealing.py), sessions and signed cursors
# made under any of them still open; everything new is sealed and signed under DJANGO_SECRET_KEY.
# `manage.py reseal` moves stored values to the current key, after which a fallback can go.
SECRET_KEY_FALLBACKS = [k for k in env.list("DJANGO_SECRET_KEY_FALLBACKS", default=[]) if k]
# `manage.py backup` / `restore` (docs/operators/backup-and-restore.md): a folder holding pg_dump
# and pg_restore of the database server's own major version, tried before the embedded server's
# wheel, /usr/lib/postgresql/<major>/bin and PATH (default empty: only those).
OPENWOP_PG_BIN_DIR = env.str("OPENWOP_PG_BIN_DIR", default="")

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
# DEBUG serves this machine only (issue 33 item 7): its pages list every URL and show tracebacks.
# A non-loopback name here is refused; the ASGI app also refuses non-loopback callers under DEBUG.
if DEBUG and (_wide := [h for h in ALLOWED_HOSTS if h and not is_loopback_host_name(h)]):
    raise ImproperlyConfigured(
        f"DJANGO_DEBUG=1 serves loopback only, but DJANGO_ALLOWED_HOSTS names {', '.join(_wide)}: "
        "to serve a network, set DJANGO_DEBUG=0 (with DJANGO_SECRET_KEY)."
    )

# The origin written into cards and facets (no trailing slash).
OPENWOP_PUBLIC_URL = env.str("OPENWOP_PUBLIC_URL", default="http://127.0.0.1:8000").rstrip("/")

# The A2A gRPC binding (`manage.py grpc_serve`, apps/a2a/grpc_server.py). The card lists a GRPC
# interface (at OPENWOP_GRPC_URL, `host:port` as gRPC clients dial it) only while
# OPENWOP_GRPC_ENABLED says the deployment runs grpc_serve: `make run` and docker/ set it, since
# they start it. TLS on the port when both a PEM certificate chain and its key are given.
OPENWOP_GRPC_ENABLED = env.bool("OPENWOP_GRPC_ENABLED", default=False)
OPENWOP_GRPC_BIND = env.str("OPENWOP_GRPC_BIND", default="127.0.0.1")
OPENWOP_GRPC_PORT = env.int("OPENWOP_GRPC_PORT", default=50051)
_grpc_host = urlsplit(OPENWOP_PUBLIC_URL).hostname or "127.0.0.1"
_grpc_host = f"[{_grpc_host}]" if ":" in _grpc_host else _grpc_host  # IPv6, as gRPC targets write it
OPENWOP_GRPC_URL = env.str("OPENWOP_GRPC_URL", default=f"{_grpc_host}:{OPENWOP_GRPC_PORT}")
OPENWOP_GRPC_TLS_CERT = env.str("OPENWOP_GRPC_TLS_CERT", default="")
OPENWOP_GRPC_TLS_KEY = env.str("OPENWOP_GRPC_TLS_KEY", default="")
OPENWOP_EGRESS_ALLOW_CIDRS = env.list("OPENWOP_EGRESS_ALLOW_CIDRS", default=[])
# Plain http only to addresses inside these ranges (apps/core/egress.py); empty: https only.
OPENWOP_EGRESS_ALLOW_HTTP_CIDRS = env.list("OPENWOP_EGRESS_ALLOW_HTTP_CIDRS", default=[])
# Who may read GET /metrics (apps/core/metrics.py): loopback when empty; else these networks only.
OPENWOP_METRICS_ALLOW_CIDRS = env.str("OPENWOP_METRICS_ALLOW_CIDRS", default="")
# A port where a process with no web server of its own (a Celery worker, grpc_serve) serves
# GET /metrics, its own samples, to the same networks (apps/core/metrics.py `metrics_serve`):
# what the Helm chart's ServiceMonitor scrapes on worker and gRPC pods. 0 (the default): none.
OPENWOP_METRICS_PORT = env.int("OPENWOP_METRICS_PORT", default=0)
# Per-tenant counts too (`openwop_tenant_*`, labelled with the tenant's slug): off by default.
OPENWOP_METRICS_TENANT_LABELS = env.bool("OPENWOP_METRICS_TENANT_LABELS", default=False)
# How long a retired card-signing key stays in /.well-known/jwks.json (apps/a2a/signing.py).
OPENWOP_CARD_KEY_GRACE_SECONDS = env.float("OPENWOP_CARD_KEY_GRACE_SECONDS", default=7 * 24 * 3600)
OPENWOP_EGRESS_CA_BUNDLE = env.str("OPENWOP_EGRESS_CA_BUNDLE", default="")
# The hosts file the egress guard reads names from (apps/core/egress.py hosts_file_addresses).
OPENWOP_EGRESS_HOSTS_FILE = env.str("OPENWOP_EGRESS_HOSTS_FILE", default="/etc/hosts")
OPENWOP_CONFORMANCE_SEAMS = env.bool("OPENWOP_CONFORMANCE_SEAMS", default=False)
# OAuth 2.1 / OIDC lanes (apps/oauth): trusted issuers' metadata and JWKS are re-fetched when older
# than this, and at most once per OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS per issuer when a token names
# an unknown `kid` (a flood of bad kids cannot hammer the issuer). Clock skew tolerated on exp/nbf/iat.
OPENWOP_OAUTH_METADATA_MAX_AGE_SECONDS = env.int("OPENWOP_OAUTH_METADATA_MAX_AGE_SECONDS", default=3600)
OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS = env.float("OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS", default=30.0)
OPENWOP_OAUTH_LEEWAY_SECONDS = env.int("OPENWOP_OAUTH_LEEWAY_SECONDS", default=60)
# The known upstream A2A releases and MCP revisions the facet refresh job evaluates against.
OPENWOP_UPSTREAM_REGISTRY = env.str(
    "OPENWOP_UPSTREAM_REGISTRY", default=str(BASE_DIR / "apps" / "facets" / "upstream_registry.json")
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "apps.core",
    "apps.tenants",
    "apps.facets",
    "apps.agents",
    "apps.runs",
    "apps.audit",
    "apps.a2a",
    "apps.mcp",
    "apps.push",
    "apps.peers",
    "apps.oauth",
    "apps.console",
    "apps.retention",
    "apps.conformance",  # the conformance profile (manage.py conformance_profile) and its relay node
]

MIDDLEWARE = [
    "apps.core.metrics.MetricsMiddleware",  # the REST wire's request counts and latencies
    "django.middleware.security.SecurityMiddleware",
    "apps.core.middleware.StaticFilesMiddleware",  # WhiteNoise, async-capable
    "apps.core.middleware.ProtocolEnvelopeMiddleware",
    "apps.core.request_limits.RequestLimitsMiddleware",
    "apps.core.unavailable.DatabaseUnavailableMiddleware",  # the console's and admin's 503 (no door renderer)
    "apps.core.middleware.SessionMiddleware",  # these three and CSRF: cookie pages only
    "django.middleware.common.CommonMiddleware",
    "apps.core.middleware.BearerApiCsrfMiddleware",
    "apps.core.middleware.AuthenticationMiddleware",
    "apps.core.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# BearerApiCsrfMiddleware *is* CsrfViewMiddleware (a subclass that skips bearer-only paths).
SILENCED_SYSTEM_CHECKS = ["security.W003"]

ROOT_URLCONF = "openwop_host.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "openwop_host.asgi.application"

# PostgreSQL, always (DESIGN.md: one dialect, one code path): DATABASE_URL's, else the embedded
# server of this checkout under var/pg (openwop_host/embedded_postgres.py), started by the host's
# first process and stopped with its last.
OPENWOP_DATABASE_EMBEDDED = not env.str("DATABASE_URL", default="")  # /readyz and the banner say which
if not OPENWOP_DATABASE_EMBEDDED:
    DATABASES = {"default": env.db("DATABASE_URL")}
    # A unix socket's folder as the URL's host, percent-encoded as libpq writes it (postgres://u@%2Frun%2Fpg/db).
    DATABASES["default"]["HOST"] = unquote(str(DATABASES["default"].get("HOST") or ""))
else:
    from openwop_host.embedded_postgres import EmbeddedPostgresRefused, embedded_database

    try:
        DATABASES = {"default": embedded_database(VAR_DIR / "pg")}
    except EmbeddedPostgresRefused as refused:  # it says why, and what to set instead
        raise ImproperlyConfigured(f"embedded PostgreSQL: {refused}") from None
    # Several test runs may share this server (a second shell, two checkouts' helpers): one test
    # database per run, as xdist shares its run uid across workers and suffixes each worker's.
    _test_run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12] or str(os.getpid())
    DATABASES["default"]["TEST"] = {"NAME": f"test_openwop_{_test_run}"}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (postgres://...): it is the only one")
DATABASES["default"].setdefault("CONN_MAX_AGE", 0)
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
# Under ASGI every request's sync code runs on its own thread, so without a pool each request
# opens (and closes) its own PostgreSQL connection, and concurrency = connections. A pool per
# process (psycopg_pool) reuses them and caps the count; bench/README.md has the numbers.
_pool_max = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if _pool_max:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, _pool_max),
        "max_size": _pool_max,
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
    }

# Behind a transaction-mode pooler (PgBouncer pool_mode = transaction; docs/operators/helm.md):
# DATABASE_URL names the pooler, and OPENWOP_DB_TRANSACTION_POOLER=1 makes every pooled connection
# safe there: no server-side prepared statements (psycopg's prepare_threshold None, on Django's
# connections and the doors' async pool) and no server-side cursors (.iterator() fetches at once),
# since consecutive transactions may land on different server connections. What needs one session
# for longer than a transaction connects to DATABASE_DIRECT_URL, PostgreSQL itself: the cache
# invalidation listener (LISTEN), beat's leader lock and retention's lock (session advisory locks).
# Required with the pooler; without it, DATABASE_URL is direct and DATABASE_DIRECT_URL is not used.
OPENWOP_DB_TRANSACTION_POOLER = env.bool("OPENWOP_DB_TRANSACTION_POOLER", default=False)
_direct_url = env.str("DATABASE_DIRECT_URL", default="")
OPENWOP_DATABASE_DIRECT = env.db_url_config(_direct_url) if _direct_url else None
if OPENWOP_DATABASE_DIRECT is not None:
    OPENWOP_DATABASE_DIRECT["HOST"] = unquote(str(OPENWOP_DATABASE_DIRECT.get("HOST") or ""))
if OPENWOP_DB_TRANSACTION_POOLER:
    if OPENWOP_DATABASE_DIRECT is None:
        raise ImproperlyConfigured(
            "OPENWOP_DB_TRANSACTION_POOLER=1 needs DATABASE_DIRECT_URL (PostgreSQL itself, not the pooler):"
            " LISTEN and session advisory locks do not survive a transaction pooler."
        )
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The protocol doors' own async pool on PostgreSQL (apps/core/async_db.py), per server process,
# beside Django's: the hot reads and the group-committed negotiation records use it.
OPENWOP_ASYNC_POOL_MAX_SIZE = env.int("OPENWOP_ASYNC_POOL_MAX_SIZE", default=8)
OPENWOP_ASYNC_POOL_TIMEOUT = env.float("OPENWOP_ASYNC_POOL_TIMEOUT", default=10.0)

REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    # Short socket timeouts: the cache holds only limit counters, which fail open (apps/core/rate_limits.py),
    # so a dead Redis must cost a request milliseconds, not a TCP timeout.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: Redis when configured, else kombu's filesystem transport (a real separate worker process).
_celery_fs_dir = VAR_DIR / "celery-broker"
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("in", "processed", "control"):
        private_folder(_celery_fs_dir / sub, root=VAR_DIR)  # messages carry tenants' ids: 0700
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_celery_fs_dir / "in"),
        "data_folder_out": str(_celery_fs_dir / "in"),
        "processed_folder": str(_celery_fs_dir / "processed"),
        "control_folder": str(_celery_fs_dir / "control"),
        "store_processed": False,
    }
# Tests give each parallel worker its own queue so live workers never take each other's tasks.
CELERY_TASK_DEFAULT_QUEUE = env.str("OPENWOP_CELERY_QUEUE", default="openwop")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_BEAT_SCHEDULE = {
    # OPENWOP_FACETS_REFRESH_SECONDS: a day; shorter only to watch beat at work (tests/cluster).
    "facets-refresh-daily": {
        "task": "facets.refresh",
        "schedule": env.float("OPENWOP_FACETS_REFRESH_SECONDS", default=24 * 60 * 60.0),
    },
    "runs-sweep-stale": {"task": "runs.sweep_stale", "schedule": 30.0},
    "facets-apply-scheduled-floors": {"task": "facets.apply_scheduled_floors", "schedule": 60.0},  # issue 24
    # Issue 36: record partitions created ahead, exports written, records and runs expired.
    "retention-apply": {"task": "retention.apply", "schedule": 60 * 60.0},
}
# Every beat process uses it: only the one holding a PostgreSQL advisory lock sends (issue 37).
CELERY_BEAT_SCHEDULER = "apps.core.beat_leader:LeaderScheduler"
# A file every beat touches on each tick, leading or standing by (apps/core/beat_leader.py): the
# Helm chart's liveness probe restarts a beat whose file is stale. Empty (the default): none.
OPENWOP_BEAT_HEARTBEAT_FILE = env.str("OPENWOP_BEAT_HEARTBEAT_FILE", default="")
# Retention (apps/retention): days a run is kept once terminal, days a record (host event) is kept;
# a tenant's RetentionPolicy overrides either or holds everything. Runs expire this many per transaction.
OPENWOP_RETENTION_RUNS_DAYS = env.int("OPENWOP_RETENTION_RUNS_DAYS", default=30)
OPENWOP_RETENTION_RECORDS_DAYS = env.int("OPENWOP_RETENTION_RECORDS_DAYS", default=90)
OPENWOP_RETENTION_BATCH_RUNS = env.int("OPENWOP_RETENTION_BATCH_RUNS", default=500)
# The share of the time the job spends expiring runs (it rests between batches): the doors first.
# 0.1: GetTask's p99 1.06-1.19x while 100k runs expire in 116-158 s; 0.25: 1.21-1.41x (bench/README.md §Session 18).
OPENWOP_RETENTION_RUNS_DUTY = env.float("OPENWOP_RETENTION_RUNS_DUTY", default=0.1)
if not 0 < OPENWOP_RETENTION_RUNS_DUTY <= 1:
    raise ImproperlyConfigured("OPENWOP_RETENTION_RUNS_DUTY is a share of the time: above 0, at most 1.")
# One record partition per interval: daily, weekly or monthly (apps/audit/partitions.py).
OPENWOP_RECORDS_PARTITION_INTERVAL = env.str("OPENWOP_RECORDS_PARTITION_INTERVAL", default="daily")
# How far ahead of now the retention job (hourly) creates record partitions, in days (10): a beat
# down for a week still finds a partition for every record, none lands in the default partition
# (`manage.py records_partitions repair` moves what did; docs/operators/retention.md).
OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS = env.int("OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS", default=10)
# The record chainer (apps/audit/chainer.py) runs every this many seconds (60): it links records a
# writer left without digests (a release before the chain, during an upgrade); on a host whose
# writers all chain it finds nothing to do. OPENWOP_MIGRATE_OFFLINE=1 says the doors are stopped
# (a maintenance window): the one-way audit migration 0010, which copies the records table while
# holding a lock that stops every door, then runs on a large table instead of refusing (default 0).
CELERY_BEAT_SCHEDULE["audit-chain-pending"] = {
    "task": "audit.chain_pending",
    "schedule": env.float("OPENWOP_AUDIT_CHAIN_SECONDS", default=60.0),
}
OPENWOP_MIGRATE_OFFLINE = env.bool("OPENWOP_MIGRATE_OFFLINE", default=False)
if min(OPENWOP_RETENTION_RUNS_DAYS, OPENWOP_RETENTION_RECORDS_DAYS, OPENWOP_RETENTION_BATCH_RUNS) < 1:
    raise ImproperlyConfigured("OPENWOP_RETENTION_RUNS_DAYS, _RECORDS_DAYS and _BATCH_RUNS are at least 1.")
if OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS < 0:
    raise ImproperlyConfigured("OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS is a number of days, at least 0.")
# Where records are exported before they expire (apps/audit/archive.py): file:///dir or
# s3://bucket/prefix (S3-compatible servers via AWS_ENDPOINT_URL and the usual AWS_* variables).
# Empty: no archive, and records expire without an export.
OPENWOP_ARCHIVE_URL = env.str("OPENWOP_ARCHIVE_URL", default="")
# Each Celery worker process writes a heartbeat row this often (apps/core/heartbeats.py); /readyz
# says "no live worker" when none consuming the runs' queue wrote within three periods. 0: off.
OPENWOP_WORKER_HEARTBEAT_SECONDS = env.float("OPENWOP_WORKER_HEARTBEAT_SECONDS", default=10.0)
# Upgrades while the previous release serves (docs/contributors/migrations.md). `migrate` takes each
# lock within OPENWOP_MIGRATE_LOCK_TIMEOUT seconds (2) and retries a migration that timed out
# OPENWOP_MIGRATE_LOCK_RETRIES times (5) before it fails naming the table (apps/core/migration_locks.py).
OPENWOP_MIGRATE_LOCK_TIMEOUT = env.float("OPENWOP_MIGRATE_LOCK_TIMEOUT", default=2.0)
OPENWOP_MIGRATE_LOCK_RETRIES = env.int("OPENWOP_MIGRATE_LOCK_RETRIES", default=5)
# Post-deploy backfills (apps/core/backfills.py; `manage.py backfill`, and the beat job below):
# rows per batch (1000; each batch is one transaction), the share of the time they work (0.25: they
# rest between batches, the doors first) and how long one beat tick works (50 s of each minute).
OPENWOP_BACKFILL_BATCH = env.int("OPENWOP_BACKFILL_BATCH", default=1000)
OPENWOP_BACKFILL_DUTY = env.float("OPENWOP_BACKFILL_DUTY", default=0.25)
OPENWOP_BACKFILL_TICK_SECONDS = env.float("OPENWOP_BACKFILL_TICK_SECONDS", default=50.0)
if OPENWOP_MIGRATE_LOCK_TIMEOUT <= 0 or OPENWOP_MIGRATE_LOCK_RETRIES < 0 or OPENWOP_BACKFILL_BATCH < 1:
    raise ImproperlyConfigured(
        "OPENWOP_MIGRATE_LOCK_TIMEOUT is above 0, OPENWOP_MIGRATE_LOCK_RETRIES at least 0,"
        " OPENWOP_BACKFILL_BATCH at least 1."
    )
if not 0 < OPENWOP_BACKFILL_DUTY <= 1:
    raise ImproperlyConfigured("OPENWOP_BACKFILL_DUTY is a share of the time: above 0, at most 1.")
CELERY_BEAT_SCHEDULE["core-backfills"] = {"task": "core.backfills", "schedule": 60.0}
# A group-commit flush still waiting after this many seconds is logged while it waits, with the lock
# it waits on and the backend holding it (apps/core/group_commit.py); again at each multiple. 1 s.
OPENWOP_FLUSH_WAIT_LOG_SECONDS = env.float("OPENWOP_FLUSH_WAIT_LOG_SECONDS", default=1.0)
# Run executor lease (apps/runs/engine.py): a dead worker's runs resume about this long after it died.
OPENWOP_RUN_LEASE_SECONDS = env.float("OPENWOP_RUN_LEASE_SECONDS", default=10.0)
# Runs of one tenant that workers advance at once, over every worker (docs/contributors/run-executor.md):
# its other runnable runs wait their turn, so one tenant's backlog cannot take every worker thread.
# A tenant's TenantBudget.runs_in_progress overrides it; 0 = unlimited. Default 8: half of one
# worker's 16 threads; a parked (delaying) run holds none.
OPENWOP_TENANT_RUNS_IN_PROGRESS = env.int("OPENWOP_TENANT_RUNS_IN_PROGRESS", default=8)
if OPENWOP_TENANT_RUNS_IN_PROGRESS < 0:
    raise ImproperlyConfigured("OPENWOP_TENANT_RUNS_IN_PROGRESS is a number of runs: 0 (unlimited) or more.")
# Tenant budgets enforced by the services before the work (apps/tenants/budgets.py,
# docs/operators/tenant-budgets.md); a tenant's TenantBudget row overrides each, 0 = unlimited.
# Past one the create is refused with 429 rate_limited (Retry-After) and writes nothing.
# Runs a tenant may start per minute (a fixed one-minute window over every door). Default 600.
OPENWOP_TENANT_RUNS_PER_MINUTE = env.int("OPENWOP_TENANT_RUNS_PER_MINUTE", default=600)
# Runs of a tenant accepted and not finished, not waiting for an interrupt nor parked on the
# clock (pending, running, cancelling and due): its backlog. Default 1000.
OPENWOP_TENANT_RUNS_QUEUED = env.int("OPENWOP_TENANT_RUNS_QUEUED", default=1000)
# A tenant's active (unrevoked) API keys. Default 100.
OPENWOP_TENANT_API_KEYS = env.int("OPENWOP_TENANT_API_KEYS", default=100)
if min(OPENWOP_TENANT_RUNS_PER_MINUTE, OPENWOP_TENANT_RUNS_QUEUED, OPENWOP_TENANT_API_KEYS) < 0:
    raise ImproperlyConfigured(
        "OPENWOP_TENANT_RUNS_PER_MINUTE, OPENWOP_TENANT_RUNS_QUEUED and OPENWOP_TENANT_API_KEYS are budgets:"
        " 0 (unlimited) or more."
    )
# A filtered list's total (A2A ListTasks totalSize with a context, time or interrupt filter) is
# counted exactly up to this many runs and is this number past it: a floor, so no page's cost grows
# with a tenant's history (issue 49 item 4). Unfiltered and status-only totals come from the tally.
OPENWOP_LIST_TOTAL_EXACT_UP_TO = env.int("OPENWOP_LIST_TOTAL_EXACT_UP_TO", default=10_000)
if OPENWOP_LIST_TOTAL_EXACT_UP_TO < 1:
    raise ImproperlyConfigured("OPENWOP_LIST_TOTAL_EXACT_UP_TO is a number of runs: 1 or more.")
# Inline advance (apps/runs/engine.py run_advance_inline): a door that waits for a run's answer
# (blocking SendMessage, MCP tools/call) runs up to this many instant nodes itself instead of a
# Celery round trip; the first node that is not inline-safe goes to the queue. 0: always the queue.
OPENWOP_INLINE_MAX_NODES = env.int("OPENWOP_INLINE_MAX_NODES", default=16)
# A2A CancelTask on a running task waits this long for its worker to commit the cancel, then
# answers the task as it is (apps/a2a/operations.py cancel_task; issue 32 item 1).
OPENWOP_A2A_CANCEL_WAIT_SECONDS = env.float("OPENWOP_A2A_CANCEL_WAIT_SECONDS", default=5.0)

# Push delivery (apps/push; webhooks.md §Durability). Discovery advertises MAX_ATTEMPTS as
# webhooks.retryPolicy.maxAttempts, so the two can never disagree.
OPENWOP_PUSH_MAX_ATTEMPTS = env.int("OPENWOP_PUSH_MAX_ATTEMPTS", default=5)
OPENWOP_PUSH_ATTEMPT_TIMEOUT = env.float("OPENWOP_PUSH_ATTEMPT_TIMEOUT", default=5.0)
OPENWOP_PUSH_BACKOFF_BASE_SECONDS = env.float("OPENWOP_PUSH_BACKOFF_BASE_SECONDS", default=2.0)
OPENWOP_PUSH_BACKOFF_MAX_SECONDS = env.float("OPENWOP_PUSH_BACKOFF_MAX_SECONDS", default=300.0)
OPENWOP_PUSH_SWEEP_SECONDS = env.float("OPENWOP_PUSH_SWEEP_SECONDS", default=15.0)
OPENWOP_PUSH_SWEEP_GRACE_SECONDS = env.float("OPENWOP_PUSH_SWEEP_GRACE_SECONDS", default=30.0)
# Lanes (apps/push/lanes.py): attempts in flight at once to one destination origin, across all
# workers; and the threads per worker process that hold sends, so a hung receiver never holds a
# Celery pool slot. Isolation holds while (hung origins x LANE_CAP) < SENDERS per process.
OPENWOP_PUSH_LANE_CAP = env.int("OPENWOP_PUSH_LANE_CAP", default=2)
OPENWOP_PUSH_SENDERS = env.int("OPENWOP_PUSH_SENDERS", default=64)
# Push attempts have a queue of their own, so run execution never waits behind a push backlog.
# Every worker consumes both queues unless started with -Q (a deployment may split them).
OPENWOP_PUSH_QUEUE = env.str("OPENWOP_PUSH_QUEUE", default=f"{CELERY_TASK_DEFAULT_QUEUE}-push")
CELERY_TASK_QUEUES = (Queue(CELERY_TASK_DEFAULT_QUEUE), Queue(OPENWOP_PUSH_QUEUE))
CELERY_TASK_ROUTES = {"push.*": {"queue": OPENWOP_PUSH_QUEUE}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["apps.tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.core.json_limits.LimitedJSONParser"],
    "EXCEPTION_HANDLER": "apps.core.api_errors.envelope_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "openwop-host",
    "DESCRIPTION": "OpenWOP v2 host: the REST wire, with A2A 1.0 and MCP 2026-07-28 advertised as facets.",
    "VERSION": __version__,  # the release number (openwop_host/__init__.py)
    "SERVE_INCLUDE_SCHEMA": False,
    # Routes that are off are not in the schema: the conformance seams unless OPENWOP_CONFORMANCE_SEAMS.
    "PREPROCESSING_HOOKS": ["apps.peers.seams.openapi_drop_seams_when_off"],
}

# Request and abuse limits (apps/core/request_limits.py, apps/core/rate_limits.py, apps/push/limits.py).
# 0 turns a limit off. Discovery shows them under extensions."openwop-host.limits": the spec's
# `limits` family has no field for any of them.
OPENWOP_MAX_BODY_BYTES = env.int("OPENWOP_MAX_BODY_BYTES", default=1024 * 1024)
# A request's body must have arrived this many seconds after its headers, or it is refused (408,
# in the door's wire) and its connection closed (apps/core/read_deadline.py). 0: no deadline.
OPENWOP_BODY_READ_TIMEOUT_SECONDS = env.float("OPENWOP_BODY_READ_TIMEOUT_SECONDS", default=30.0)
OPENWOP_MAX_JSON_DEPTH = env.int("OPENWOP_MAX_JSON_DEPTH", default=64)
OPENWOP_RATE_LIMIT_REQUESTS = env.int("OPENWOP_RATE_LIMIT_REQUESTS", default=1200)
OPENWOP_RATE_LIMIT_WINDOW_SECONDS = env.int("OPENWOP_RATE_LIMIT_WINDOW_SECONDS", default=60)
OPENWOP_MAX_STREAMS_PER_KEY = env.int("OPENWOP_MAX_STREAMS_PER_KEY", default=32)
# Tenant budgets beside the per-key ones, over all of a tenant's keys (a tenant's TenantBudget row
# overrides them; apps/core/request_limits.py): requests per window (the window above, 60 s by
# default) and streams open at once; refused with 429 / the door's own error naming the budget.
# Enforced once this process has seen one of the tenant's keys authenticate (no query per request).
OPENWOP_TENANT_REQUESTS_PER_MINUTE = env.int("OPENWOP_TENANT_REQUESTS_PER_MINUTE", default=6000)
OPENWOP_TENANT_STREAMS = env.int("OPENWOP_TENANT_STREAMS", default=128)
# Streams open at once in one web (or gRPC) process, every tenant together.
OPENWOP_MAX_STREAMS = env.int("OPENWOP_MAX_STREAMS", default=1000)
# A request refused for its rate (the key's or its tenant's budget) is answered after this pause
# (at most its Retry-After), so a flood on a few connections sends one request per connection
# per pause instead of thousands a second that the host spends its CPU refusing (issue 49 item 3).
# At most OPENWOP_REFUSAL_PAUSE_MAX refusals wait at once per process; past that, answered at once.
# Only the event-loop doors pause (A2A, MCP, the REST wire served async, gRPC). 0: no pause.
OPENWOP_REFUSAL_PAUSE_SECONDS = env.float("OPENWOP_REFUSAL_PAUSE_SECONDS", default=1.0)
OPENWOP_REFUSAL_PAUSE_MAX = env.int("OPENWOP_REFUSAL_PAUSE_MAX", default=512)
if OPENWOP_REFUSAL_PAUSE_SECONDS < 0 or OPENWOP_REFUSAL_PAUSE_MAX < 0:
    raise ImproperlyConfigured("OPENWOP_REFUSAL_PAUSE_SECONDS and OPENWOP_REFUSAL_PAUSE_MAX are 0 or more.")
# Fair turns (apps/core/fair_turns.py): at most this many A2A, MCP and REST requests are served at once
# per process; past that a request waits, and a freed turn goes to the waiting tenant that has
# used the least of the process lately, so one tenant's heavy or many requests never become
# another's wait. A request holding a turn longer than OPENWOP_FAIR_HOLD_SECONDS (a blocking
# SendMessage, a tools/call waiting for its run) gives it up and goes on. Streams take no turn.
# 0: no turns (every request served as it arrives).
OPENWOP_FAIR_SLOTS = env.int("OPENWOP_FAIR_SLOTS", default=8)
OPENWOP_FAIR_HOLD_SECONDS = env.float("OPENWOP_FAIR_HOLD_SECONDS", default=0.5)
if OPENWOP_FAIR_SLOTS < 0 or OPENWOP_FAIR_HOLD_SECONDS < 0:
    raise ImproperlyConfigured("OPENWOP_FAIR_SLOTS and OPENWOP_FAIR_HOLD_SECONDS are 0 or more.")
# An open stream re-checks its credential this often and ends once it is revoked or expired
# (apps/core/stream_lease.py).
OPENWOP_STREAM_RECHECK_SECONDS = env.float("OPENWOP_STREAM_RECHECK_SECONDS", default=5.0)
# A stream's slot is a lease its stream renews while open (every recheck, and at least three times
# a lease); the slots of a process that died (SIGKILL, OOM) free themselves after this many seconds.
OPENWOP_STREAM_SLOT_LEASE_SECONDS = env.float("OPENWOP_STREAM_SLOT_LEASE_SECONDS", default=30.0)
OPENWOP_MAX_PUSH_CONFIGS_PER_TASK = env.int("OPENWOP_MAX_PUSH_CONFIGS_PER_TASK", default=10)
OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT = env.int("OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT", default=10000)
# Tenant console sign-in: failures per username + address within the window (apps/console/login_throttle.py).
OPENWOP_CONSOLE_LOGIN_FAILURES = env.int("OPENWOP_CONSOLE_LOGIN_FAILURES", default=5)
OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS = env.int("OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS", default=900)
# ...and per username from every address together: past this many failures (remembered until a day
# passes without one; 0: off) its password is checked once per delay, the delay starting at
# ..._USERNAME_DELAY_SECONDS and doubling per failure up to the window above; an address the username
# signed in from within ..._KNOWN_ADDRESS_DAYS (0: none) is not delayed.
OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES = env.int("OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES", default=10)
OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS = env.int("OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS", default=60)
OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS = env.int("OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS", default=30)
# Django's own ceiling on form bodies (admin, console) never below the wire's.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, OPENWOP_MAX_BODY_BYTES)

# Production hardening, effective whenever DEBUG is off (checked by `manage.py check --deploy`).
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
if not DEBUG:
    # Behind a TLS-terminating proxy set DJANGO_SECURE_PROXY_SSL_HEADER=1 so Django trusts its
    # X-Forwarded-Proto; never set it when clients reach Daphne directly (they could forge it).
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    if env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
    # Subdomains and preload are commitments for the whole domain (preload lists are slow to leave):
    # on by default for a host that owns its domain, off with these variables otherwise.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)

# OPENWOP_LOG_FORMAT=json: one JSON object per line (apps/core/logformat.py), Django's and uvicorn's
# own loggers included; default `text`, the bare message. Both redact what looks like a secret.
OPENWOP_LOG_FORMAT = env.str("OPENWOP_LOG_FORMAT", default="text").strip().lower()
if OPENWOP_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured("OPENWOP_LOG_FORMAT must be 'text' or 'json'.")
_json_logs = OPENWOP_LOG_FORMAT == "json"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "apps.core.logformat.RedactingFormatter"},
        "json": {"()": "apps.core.logformat.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": OPENWOP_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.str("DJANGO_LOG_LEVEL", default="INFO")},
    # httpx logs full URLs (queries included) at INFO; httpcore logs headers at DEBUG.
    "loggers": {
        "django.request": {"level": "ERROR"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "INFO"},
        # json: the loggers that bring handlers of their own (Django's defaults, uvicorn's config)
        # write through the root's JSON handler instead.
        **(
            {
                "django": {"handlers": [], "level": "INFO"},
                "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
                "uvicorn": {"handlers": ["console"], "level": "INFO", "propagate": False},
                "uvicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
            }
            if _json_logs
            else {}
        ),
    },
}
# json: a Celery worker keeps the handlers above instead of installing its own text ones.
CELERY_WORKER_HIJACK_ROOT_LOGGER = not _json_logs
