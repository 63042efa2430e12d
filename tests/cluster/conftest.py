"""One cluster for the session (scripts/cluster.py as a library): 2 web replicas, 2 gRPC servers,
2 workers and a beat behind HAProxy, on a database and Redis of their own, stopped after.

`make cluster-test` runs these (tests/conftest.py leaves them out of `make test`). The database is
DATABASE_URL's server with `<name>_cluster` (dropped and created fresh), unless
CLUSTER_TEST_DATABASE_URL names one; Redis is CLUSTER_TEST_REDIS_URL, else REDIS_URL's server, db 14.
The tests reach the cluster only through its wire (and manage.py, as an operator would); their
database reads go over a psycopg connection of their own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
import pytest
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("openwop_cluster", ROOT / "scripts" / "cluster.py")
assert _spec is not None and _spec.loader is not None
cluster_lib = importlib.util.module_from_spec(_spec)
sys.modules["openwop_cluster"] = cluster_lib
_spec.loader.exec_module(cluster_lib)
Cluster = cluster_lib.Cluster

# OPENWOP_RATE_LIMIT_REQUESTS of the cluster: per key, over a window longer than the session.
RATE_LIMIT = 200
RATE_WINDOW_SECONDS = 86400
# facets.refresh every this many seconds (a day by default): beat's work becomes visible.
REFRESH_SECONDS = 6.0


def _database_url() -> str:
    if explicit := os.environ.get("CLUSTER_TEST_DATABASE_URL"):
        return explicit
    base = urlsplit(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/openwop")
    name = unquote(base.path.lstrip("/")) or "openwop"
    return base._replace(path=f"/{name}_cluster").geturl()


def _redis_url() -> str:
    if explicit := os.environ.get("CLUSTER_TEST_REDIS_URL"):
        return explicit
    base = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return base._replace(path="/14").geturl()


def _conninfo(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def _database_fresh(url: str) -> None:
    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    with psycopg.connect(_conninfo(parts._replace(path="/postgres").geturl()), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    database_url, redis_url = _database_url(), _redis_url()
    try:
        cluster_lib.redis_check(redis_url)
    except cluster_lib.ClusterError as exc:
        pytest.fail(f"the cluster tests need Redis: {exc}")
    _database_fresh(database_url)
    cluster_dir = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENWOP_CLUSTER"))}
    env.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "cluster-test-secret-key-" + "x" * 40,
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "OPENWOP_VAR_DIR": str(cluster_dir / "var"),
            "OPENWOP_CELERY_QUEUE": f"openwop-cluster-test-{os.getpid()}",
            "OPENWOP_RATE_LIMIT_REQUESTS": str(RATE_LIMIT),
            "OPENWOP_RATE_LIMIT_WINDOW_SECONDS": str(RATE_WINDOW_SECONDS),
            "OPENWOP_FACETS_REFRESH_SECONDS": str(REFRESH_SECONDS),
            # Loopback receivers over plain http, for these processes only (webhooks.md §Egress stays on).
            "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
            "OPENWOP_EGRESS_ALLOW_HTTP_CIDRS": "127.0.0.0/8",
            "OPENWOP_PUSH_ATTEMPT_TIMEOUT": "4",
            "OPENWOP_PUSH_BACKOFF_BASE_SECONDS": "0.5",
            "OPENWOP_PUSH_SWEEP_SECONDS": "1",
            "OPENWOP_PUSH_SWEEP_GRACE_SECONDS": "1",
            "OPENWOP_RUN_LEASE_SECONDS": "3",
        }
    )
    started = cluster_lib.start(cluster_dir=cluster_dir, env=env, lb_port=0, grpc_lb_port=0)
    try:
        yield started
    finally:
        started.stop()


def manage(cluster: Any, *args: str, env: dict[str, str] | None = None) -> str:
    """`manage.py <args>` with the cluster's environment (and `env`), as an operator runs it; its stdout."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**cluster.env, **(env or {})},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def new_key(cluster: Any, tenant: str = "acme") -> str:
    return manage(cluster, "create_api_key", "--tenant", tenant).strip()


def db_rows(cluster: Any, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(_conninfo(cluster.env["DATABASE_URL"]), autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def haproxy_current_sessions(cluster: Any, backend: str) -> dict[str, int]:
    """`show stat` of the balancer: current sessions per server of `backend`."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(cluster.dir / "haproxy.sock"))
        sock.sendall(b"show stat\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    lines = raw.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    current: dict[str, int] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(","), strict=False))
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND", None):
            current[row["svname"]] = int(row.get("scur") or 0)
    return current


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def card_json(url: str) -> dict[str, Any]:
    import httpx

    response = httpx.get(f"{url}/.well-known/agent-card.json", timeout=10)
    response.raise_for_status()
    return json.loads(response.text)
