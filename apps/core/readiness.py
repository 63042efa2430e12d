"""Readiness (`GET /readyz`): whether this process can serve, not merely whether it is alive.

`/healthz` answers while the process runs; `/readyz` also asks what the host's work needs: the
default database (`SELECT 1`), the write path (`check_write_path`: the locks a door's record write
takes, within the check's deadline), the Celery broker (a Redis `PING`), the channel layer (a
message sent to a fresh channel and received back) and a live worker (one consuming the runs'
queue wrote its heartbeat lately: apps/core/heartbeats.py; a queue nobody consumes accepts runs
that never run). 200 `{"status": "ready"}`, else 503 `{"status": "not-ready", "failing": [...],
"reasons": {...}}` naming only the failing checks, each with a fixed sentence: never an
exception's text, a connection string or a password, in the body or in the log (the class name
only).

`/readyz?scope=replica` leaves the worker out: what a balancer or an orchestrator asks of one web
replica, which serves reads and accepts runs whether or not a worker is alive (taking every
replica out of service because the workers are down would stop the doors too).

A check is a name, a sentence, and a callable in `_checks` (blocking ones run on a thread of their
own): adding one is one entry there.

Each check has its own deadline, and they run side by side, so the answer comes within about
`CHECK_TIMEOUT_SECONDS` even when a dependency hangs. The blocking checks (database, broker) run on
a daemon thread of their own: a hung one is left behind (it ends with its socket's own timeout)
instead of holding the request or a shared executor slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, JsonResponse

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_SECONDS = 1.0

DATABASE = "database"
WRITE_PATH = "write-path"
BROKER = "broker"
CHANNEL_LAYER = "channel-layer"
WORKER = "worker"

# What `/readyz` says of each failing check (fixed text: nothing of the error itself).
REASONS = {
    DATABASE: "the database did not answer",
    BROKER: "the Celery broker did not answer",
    CHANNEL_LAYER: "the channel layer did not answer",
    WORKER: "no live worker",
    WRITE_PATH: "a record write could not take its locks in time",
}


class NoLiveWorker(Exception):
    """No worker consuming the runs' queue wrote its heartbeat within its window."""


# The write path's probes, handed in by the apps that own the tables a door writes (apps/audit: the
# record write); each takes, on the cursor it is given, the locks its write takes, writing nothing.
_write_path_probes: list[Callable[[Any], None]] = []


def register_write_path_probe(probe: Callable[[Any], None]) -> None:
    if probe not in _write_path_probes:
        _write_path_probes.append(probe)


def check_database(connection: BaseDatabaseWrapper | None = None) -> None:
    """`SELECT 1` on `connection` (default: this thread's connection to the default database),
    closed afterwards: the check runs on a thread of its own, which nothing else would close.
    A connection made on another thread is shared with this one for the check (Django refuses
    cross-thread use otherwise)."""
    shared = connection is not None
    conn = connection if connection is not None else connections[DEFAULT_DB_ALIAS]
    if shared:
        conn.inc_thread_sharing()
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
            if cursor.fetchone() != (1,):
                raise RuntimeError("SELECT 1 answered something else")
    finally:
        try:
            conn.close()
        finally:
            if shared:
                conn.dec_thread_sharing()


def check_write_path(*, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
    """The registered write-path probes in one transaction, rolled back, under `lock_timeout` and
    `statement_timeout` = `timeout`: a door whose write waits on a lock (a migration's ACCESS
    EXCLUSIVE, a table rewrite) is not ready, though `SELECT 1` answers. Nothing is written.
    The connection is closed afterwards (the check's thread is its own)."""
    from django.db import transaction

    conn = connections[DEFAULT_DB_ALIAS]
    try:
        with transaction.atomic(), conn.cursor() as cursor:
            milliseconds = f"{max(1, round(timeout * 1000))}ms"
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)",
                [milliseconds, milliseconds],
            )
            for probe in _write_path_probes:
                probe(cursor)
            transaction.set_rollback(True)
    finally:
        conn.close()


def check_broker(broker_url: str | None = None, *, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
    """The Celery broker: PING for Redis; the in-memory transport and eager mode have nothing to ask;
    the filesystem transport (the zero-setup default) needs its folder; others through kombu."""
    url = settings.CELERY_BROKER_URL if broker_url is None else broker_url
    if (broker_url is None and getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False)) or url.startswith("memory://"):
        return
    if url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
        return
    if url.startswith("filesystem://"):
        options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
        folder = options.get("data_folder_in", "")
        if not (folder and os.path.isdir(folder) and os.access(folder, os.W_OK)):
            raise FileNotFoundError("the filesystem broker's folder is missing or read-only")
        return
    from kombu import Connection

    with Connection(url, connect_timeout=timeout) as kombu_connection:
        kombu_connection.ensure_connection(max_retries=1, timeout=timeout)


def check_worker(queue: str | None = None, *, within_seconds: float | None = None) -> None:
    """A worker that consumes `queue` (default: the runs' queue) wrote its heartbeat within
    `within_seconds` (default: LIVE_PERIODS heartbeat periods), else NoLiveWorker. Nothing to ask
    in eager mode (tasks run in the caller) or with heartbeats off. While the database does not
    answer this check cannot tell, and passes: the database check names what is wrong then."""
    from apps.core.heartbeats import LIVE_PERIODS, heartbeat_period_seconds, live_worker_exists

    period = heartbeat_period_seconds()
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False) or period <= 0:
        return
    conn = connections[DEFAULT_DB_ALIAS]
    try:
        live = live_worker_exists(
            queue=queue or str(settings.CELERY_TASK_DEFAULT_QUEUE),
            within_seconds=within_seconds if within_seconds is not None else LIVE_PERIODS * period,
        )
    except DatabaseError:
        return
    finally:
        conn.close()
    if not live:
        raise NoLiveWorker()


async def check_channel_layer(layer: Any = None) -> None:
    """A round trip through the channel layer: send to a fresh channel and receive it back.
    The in-memory layer (one process, no server) and no layer at all are ready by definition."""
    layer = get_channel_layer() if layer is None else layer
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return
    channel = await layer.new_channel(prefix="readyz")
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "readyz.ping", "token": token})
    message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("the channel layer answered another message")


async def _on_own_thread(check: Callable[[], None]) -> None:
    """Run a blocking check on a daemon thread and await it; a hang is the caller's timeout."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():  # the caller timed out and went on
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            check()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="readyz-check", daemon=True).start()
    await done


async def _passes(name: str, check: Awaitable[None], timeout: float) -> bool:
    try:
        await asyncio.wait_for(check, timeout)
    except Exception as exc:
        # The class only: a driver's message can carry a host, a user or a whole connection string.
        logger.warning("readiness check %s failed: %s", name, type(exc).__name__)
        return False
    return True


def _checks(
    *,
    database: BaseDatabaseWrapper | None,
    broker_url: str | None,
    channel_layer: Any,
    worker_queue: str | None,
    timeout: float,
    worker: bool,
) -> list[tuple[str, Awaitable[None]]]:
    """Every check, in the order `/readyz` names them (`worker` False: all but the worker's)."""
    checks: list[tuple[str, Awaitable[None]]] = [
        (DATABASE, _on_own_thread(lambda: check_database(database))),
        (WRITE_PATH, _on_own_thread(lambda: check_write_path(timeout=timeout))),
        (BROKER, _on_own_thread(lambda: check_broker(broker_url, timeout=timeout))),
        (CHANNEL_LAYER, check_channel_layer(channel_layer)),
    ]
    if worker:
        checks.append((WORKER, _on_own_thread(lambda: check_worker(worker_queue))))
    return checks


async def readiness_failures(
    *,
    database: BaseDatabaseWrapper | None = None,
    broker_url: str | None = None,
    channel_layer: Any = None,
    worker_queue: str | None = None,
    timeout: float = CHECK_TIMEOUT_SECONDS,
    worker: bool = True,
) -> list[str]:
    """The names of the failing checks, in a fixed order (empty: ready). Each target defaults to
    this host's own; tests pass unreachable ones."""
    checks = _checks(
        database=database, broker_url=broker_url, channel_layer=channel_layer, worker_queue=worker_queue,
        timeout=timeout, worker=worker,
    )  # fmt: skip
    results = await asyncio.gather(*(_passes(name, check, timeout) for name, check in checks))
    return [name for (name, _), passed in zip(checks, results, strict=True) if not passed]


def readiness_body(failing: list[str]) -> tuple[int, dict[str, Any]]:
    if failing:
        return 503, {"status": "not-ready", "failing": failing, "reasons": {name: REASONS[name] for name in failing}}
    return 200, {"status": "ready"}


def backends_in_use() -> dict[str, str]:
    """Which back end serves each need, never where it is (PostgreSQL always, embedded when
    DATABASE_URL is unset; Redis optional, in-process stand-ins without it)."""
    layer = str(settings.CHANNEL_LAYERS["default"]["BACKEND"])
    cache = str(settings.CACHES["default"]["BACKEND"])
    broker = "eager" if settings.CELERY_TASK_ALWAYS_EAGER else str(settings.CELERY_BROKER_URL).split(":", 1)[0]
    return {
        "database": "embedded-postgresql" if getattr(settings, "OPENWOP_DATABASE_EMBEDDED", False) else "postgresql",
        "broker": broker,
        "channelLayer": "redis" if "redis" in layer.lower() else "in-process",
        "counters": "redis" if "redis" in cache.lower() else "in-process",
    }


async def readyz(request: HttpRequest) -> JsonResponse:
    replica = request.GET.get("scope") == "replica"
    status, body = readiness_body(await readiness_failures(worker=not replica))
    body = {**body, "backends": backends_in_use()}
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response
