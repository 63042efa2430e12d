"""One beat sends the periodic jobs, however many beat processes run.

Celery beat has no coordination of its own: two beats started by mistake (a second deployment, a
manual `celery beat` beside the service, a rolling restart) each send every job once per period, so
each job ran twice. This scheduler (settings.CELERY_BEAT_SCHEDULER, so every beat uses it) sends
only while it holds a PostgreSQL session advisory lock on a connection of its own; the others stand
by and try again every LEADER_RETRY_SECONDS. PostgreSQL, not Redis: `make run` has no Redis, and a
session lock ends with its connection, so a SIGKILLed leader's standby takes over on its next try.
A leader whose connection fails notices on its next check (every LEADER_CHECK_SECONDS) and stops
sending until it holds the lock again.

A beat that takes the lead after standing by starts every period afresh: its own record of the
last runs (its schedule file) is as old as its stand-by, while the leader before it may have sent
any job a moment ago. So after a takeover a job runs one period later, never twice in one period.

Every tick, leading or standing by, touches OPENWOP_BEAT_HEARTBEAT_FILE when it is set: the chart's
liveness probe restarts a beat whose file grew stale (its loop is stuck), never one that merely
stands by or cannot reach PostgreSQL.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import psycopg
from celery.beat import PersistentScheduler
from django.conf import settings

from apps.core.async_db import conninfo

logger = logging.getLogger(__name__)

# pg_try_advisory_lock's key: the first 8 bytes of sha256("openwop-host.beat"), as a signed bigint.
LEADER_LOCK_KEY = 0x3A5F0C2B9D41E677
LEADER_RETRY_SECONDS = 2.0
LEADER_CHECK_SECONDS = 5.0


class LeaderScheduler(PersistentScheduler):
    """PersistentScheduler (the schedule file of `--schedule`) that ticks only while it leads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._checked_at = 0.0
        self._stood_by = False  # whether another beat may have sent jobs since this one last led
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self._heartbeat()
        if not self._leads():
            return LEADER_RETRY_SECONDS
        return float(super().tick(*args, **kwargs))

    def close(self) -> None:
        self._release()
        super().close()

    def _heartbeat(self) -> None:
        path = getattr(settings, "OPENWOP_BEAT_HEARTBEAT_FILE", "")
        if not path:
            return
        try:
            Path(path).touch()
        except OSError as exc:
            if not getattr(self, "_said_heartbeat", False):
                logger.warning("beat: cannot touch its heartbeat file (%s)", type(exc).__name__)
                self._said_heartbeat = True

    def _leads(self) -> bool:
        now = time.monotonic()
        if self._lock_conn is not None:
            if now - self._checked_at < LEADER_CHECK_SECONDS:
                return True
            self._checked_at = now
            try:
                self._lock_conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                logger.warning("beat: lost the leader connection; standing by")
                self._release()
                self._stood_by = True
                return False
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = psycopg.connect(
                conninfo(direct=True), autocommit=True, connect_timeout=5, application_name="openwop-beat-leader",
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            )  # fmt: skip
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,)).fetchone()
        except psycopg.Error as exc:
            logger.warning("beat: cannot reach PostgreSQL to take the lead (%s); retrying", type(exc).__name__)
            if conn is not None:
                conn.close()
            self._stood_by = True
            return False
        if not (row and row[0]):
            conn.close()
            self._stood_by = True
            if not getattr(self, "_said_standby", False):
                logger.info("beat: another beat leads; this one stands by")
                self._said_standby = True
            return False
        self._lock_conn, self._checked_at, self._said_standby = conn, now, False
        if self._stood_by:
            self._periods_restart()
            self._stood_by = False
        logger.info("beat: this beat leads and sends the periodic jobs")
        return True

    def _periods_restart(self) -> None:
        """Every job's period starts now (module docstring: a takeover never sends a job early)."""
        now = self.app.now()
        for entry in self.schedule.values():
            entry.last_run_at = now
        self._heap = None  # the next tick orders the jobs by their new times

    def _release(self) -> None:
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()  # the session lock ends with the session
