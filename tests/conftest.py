"""Shared fixtures: API keys, and a live host (uvicorn + Celery worker) on loopback."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from apps.tenants.models import Tenant
from apps.tenants.services import api_key_create, tenant_get_or_create
from tests.live import LiveProcess, process_env, start_celery_worker, start_web

# The cross-replica tests start a whole cluster behind HAProxy (slow, one session): `make
# cluster-test` runs them (OPENWOP_CLUSTER_TESTS=1), so `make test` never collects them twice.
CLUSTER_TESTS = os.environ.get("OPENWOP_CLUSTER_TESTS", "") == "1"
# The Helm chart's tests need Helm and the Kubernetes schemas (pyproject's `chart` extra): `make
# chart-test` installs them and runs tests/chart (OPENWOP_CHART_TESTS=1).
CHART_TESTS = os.environ.get("OPENWOP_CHART_TESTS", "") == "1"
collect_ignore = ([] if CLUSTER_TESTS else ["cluster"]) + ([] if CHART_TESTS else ["chart"])


def pytest_configure(config: pytest.Config) -> None:
    _flush_retrying_deadlocks()


def pytest_collection_finish(session: pytest.Session) -> None:
    """openwop_host.asgi, which in-process door tests import (tests/door_client.py), freezes what
    survives each full collection (openwop_host/gc_policy.py): right for a server, wrong for a test
    process that collects on purpose (tests/core/test_lost_wakeup_cleanup.py). It is imported here,
    once, so that its install() has run before the uninstall below and no test's later import
    installs it again. The live servers the tests start keep it; tests/test_gc_policy.py installs
    it where it is the subject."""
    import openwop_host.asgi  # noqa: F401 - imported for its install(), undone below
    from openwop_host import gc_policy

    gc_policy.uninstall()


def _flush_retrying_deadlocks() -> None:
    """pytest-django empties the database after each transactional test with one TRUNCATE of every
    table. A live worker or server of the session may still be finishing an earlier test's run (a
    cancel's last events, their push fan-out read), and PostgreSQL may pick the TRUNCATE as the
    victim of the deadlock between them; the flush then failed and left the rows to the next test.
    Try again once the other transaction is done (the failed flush rolled back as a whole)."""
    from django.core.management.base import CommandError
    from django.core.management.commands import flush

    original = flush.Command.handle
    if getattr(original, "retries_deadlocks", False):
        return

    def handle(self: flush.Command, **options: object) -> object:
        for attempt in range(5):
            try:
                return original(self, **options)
            except CommandError as exc:
                if "deadlock detected" not in str(exc.__cause__) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    handle.retries_deadlocks = True  # type: ignore[attr-defined]
    flush.Command.handle = handle  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A `db` test's rows live in a transaction open on Django's connection, which the event
    loop's pool cannot see: its statements join that transaction instead (apps/core/async_db.py).
    Read once every fixture is set up: the test's atomic block is open by then, or never."""
    from apps.core.async_db import statements_join_django_transaction

    statements_join_django_transaction(connection.in_atomic_block)
    yield
    statements_join_django_transaction(False)


def pytest_report_header(config: pytest.Config) -> list[str]:
    db = "PostgreSQL" if os.environ.get("DATABASE_URL") else "embedded PostgreSQL (var/pg)"
    redis = "Redis" if os.environ.get("REDIS_URL") else "in-memory channel layer, filesystem broker"
    cluster = "" if CLUSTER_TESTS else "; tests/cluster not collected (they run in `make cluster-test`)"
    chart = "" if CHART_TESTS else "; tests/chart not collected (they run in `make chart-test`)"
    return [f"openwop-host: database {db}; {redis}{cluster}{chart}"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):  # type: ignore[no-untyped-def]
    """pytest-django's, plus: the cache invalidation listener (apps/core/invalidation.py) closes
    its connection before the test database is dropped (an open one would block the DROP)."""
    from apps.core.invalidation import invalidation_shutdown

    yield
    invalidation_shutdown()


@pytest.fixture
def embedded_tmp() -> Iterator[Path]:
    """A temporary folder for a process that runs the embedded PostgreSQL (no DATABASE_URL), with a
    short path (pytest's own root is deep, and a unix socket's path is short)."""
    folder = Path(tempfile.mkdtemp(prefix="openwop-t-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def make_key(db):  # type: ignore[no-untyped-def]
    """make_key("acme", kind="user") -> raw API key for a (created if missing) tenant."""

    def _make(slug: str = "acme", *, kind: str = "user") -> str:
        tenant, _ = tenant_get_or_create(slug=slug)
        _, raw = api_key_create(tenant=tenant, kind=kind)
        return raw

    return _make


@pytest.fixture
def tenant(db) -> Tenant:  # type: ignore[no-untyped-def]
    return tenant_get_or_create(slug="acme")[0]


@pytest.fixture(scope="session")
def _live_env(django_db_setup, django_db_blocker, tmp_path_factory, worker_id):  # type: ignore[no-untyped-def]
    var_dir = tmp_path_factory.mktemp("live-var")
    with django_db_blocker.unblock():
        connection.ensure_connection()
        env = process_env(worker_id, var_dir)
    return env, var_dir


@pytest.fixture(scope="session")
def _live_web(_live_env) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, var_dir = _live_env
    live, base_url = start_web(env, var_dir)
    yield base_url
    live.stop()


@pytest.fixture
def live_url(_live_web: str, transactional_db) -> str:  # type: ignore[no-untyped-def]
    """Base URL of a uvicorn serving the host against this test's (committed) database."""
    return _live_web


@pytest.fixture(scope="session")
def _live_worker(_live_env) -> Iterator[LiveProcess]:  # type: ignore[no-untyped-def]
    env, var_dir = _live_env
    live = start_celery_worker(env, var_dir)
    yield live
    live.stop()


@pytest.fixture
def live_worker(_live_worker: LiveProcess, transactional_db) -> LiveProcess:  # type: ignore[no-untyped-def]
    """A real Celery worker consuming this test session's queue."""
    return _live_worker


@pytest.fixture(scope="session")
def live_env(_live_env):  # type: ignore[no-untyped-def]
    """(env, var_dir) the live processes run with, to start more workers (e.g. after a kill)."""
    return _live_env
