"""Post-deploy backfills (apps/core/backfills.py): batched, resumable, one runner at a time, under
the migrations' lock timeout, their progress in the log and in /metrics."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test import Client

from apps.core.backfills import Backfill, backfill_progress, backfill_register, backfill_run, backfill_unregister
from openwop_host.celery import app as celery_app

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = "backfill_probe"
NAME = "tests.probe"
ROWS = 25


def _step(cursor: Any, position: str | None, size: int) -> tuple[str | None, int]:
    """Adds each row's id to `filled` once: a batch applied twice would show as 2 x id."""
    cursor.execute(f"SELECT id FROM {TABLE} WHERE id > %s ORDER BY id LIMIT %s", [int(position or 0), size])
    ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return None, 0
    cursor.execute(f"UPDATE {TABLE} SET filled = coalesce(filled, 0) + id WHERE id = ANY(%s)", [ids])
    crash = getattr(_step, "crash_after", None)
    if crash is not None and ids[-1] > crash:
        raise RuntimeError("the worker died mid-batch")
    return str(ids[-1]), cursor.rowcount


@pytest.fixture
def probe(settings: Any) -> Iterator[Backfill]:
    settings.OPENWOP_MIGRATE_LOCK_TIMEOUT = 0.2
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, filled int)")
        cursor.execute(f"INSERT INTO {TABLE} (id) SELECT generate_series(1, {ROWS})")
    backfill = Backfill(name=NAME, description="a probe", step=_step)
    backfill_register(backfill)
    yield backfill
    backfill_unregister(NAME)
    _step.crash_after = None  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")


def _filled() -> list[int | None]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT filled FROM {TABLE} ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def test_batches_to_the_end_resting_between_them(probe: Backfill, caplog: pytest.LogCaptureFixture) -> None:
    rests: list[float] = []
    caplog.set_level("INFO", logger="apps.core.backfills")
    report = backfill_run(name=NAME, batch_size=10, duty=0.5, sleep=rests.append)
    assert report.done and report.rows == ROWS and report.batches == 4  # 10, 10, 5, then nothing left
    assert _filled() == list(range(1, ROWS + 1))
    progress = backfill_progress(name=NAME)
    assert progress is not None and progress.done_at is not None and progress.rows == ROWS and progress.position == ""
    assert len(rests) == 3 and all(rest >= 0 for rest in rests)  # duty 0.5: as long as the batch took
    assert "backfill tests.probe: 20 rows so far (2 batches), next after '20'" in caplog.text
    # Done stays done: a second run changes nothing.
    assert backfill_run(name=NAME, batch_size=10, sleep=rests.append).rows == 0
    assert _filled() == list(range(1, ROWS + 1))


def test_a_batch_that_dies_is_rolled_back_with_its_position_and_resumed(probe: Backfill) -> None:
    _step.crash_after = 10  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        backfill_run(name=NAME, batch_size=10, duty=1)
    progress = backfill_progress(name=NAME)
    assert progress is not None and progress.position == "10" and progress.rows == 10 and progress.done_at is None
    assert _filled() == list(range(1, 11)) + [None] * (ROWS - 10)
    _step.crash_after = None  # type: ignore[attr-defined]
    report = backfill_run(name=NAME, batch_size=10, duty=1)
    assert report.done and report.rows == ROWS - 10
    assert _filled() == list(range(1, ROWS + 1))  # no row filled twice


def test_one_runner_at_a_time(probe: Backfill) -> None:
    backfill_run(name=NAME, batch_size=10, duty=1, seconds=0)  # creates the progress row only
    other = connections.create_connection("default")
    other.ensure_connection()
    raw = other.connection
    raw.execute("BEGIN")
    raw.execute("SELECT 1 FROM core_backfillprogress WHERE name = %s FOR UPDATE", [NAME])
    try:
        assert backfill_run(name=NAME, batch_size=10, duty=1).busy
        with pytest.raises(CommandError, match="being run by another process"):
            call_command("backfill", NAME, stdout=io.StringIO())
    finally:
        raw.close()
    assert _filled() == [None] * ROWS


def test_a_batch_that_cannot_lock_gives_way_and_tries_again(probe: Backfill) -> None:
    other = connections.create_connection("default")
    other.ensure_connection()
    raw = other.connection
    raw.execute("BEGIN")
    raw.execute(f"LOCK TABLE {TABLE} IN SHARE MODE")  # blocks the batch's UPDATE

    def rest(seconds: float) -> None:
        if raw.info.transaction_status:  # the first rest after the lock timeout: the holder goes
            raw.execute("COMMIT")

    try:
        report = backfill_run(name=NAME, batch_size=100, duty=1, sleep=rest)
    finally:
        raw.close()
    assert report.done and report.lock_retries == 1 and _filled() == list(range(1, ROWS + 1))


def test_progress_in_metrics_and_the_list(probe: Backfill) -> None:
    listed = io.StringIO()
    call_command("backfill", "--list", stdout=listed)
    assert f"{NAME}: not started, 0 rows" in listed.getvalue()
    before = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert f'openwop_backfill_pending{{backfill="{NAME}"}} 1.0' in before
    ran = io.StringIO()
    call_command("backfill", "--batch-size", "10", "--duty", "1", stdout=ran)  # every pending one
    assert f"{NAME}: done, {ROWS} rows in 4 batches" in ran.getvalue()
    after = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert f'openwop_backfill_pending{{backfill="{NAME}"}} 0.0' in after
    assert f'openwop_backfill_rows_done{{backfill="{NAME}"}} {ROWS}.0' in after
    assert f'openwop_backfill_rows_total{{backfill="{NAME}"}}' in after
    with pytest.raises(CommandError, match="no backfill named nope"):
        call_command("backfill", "nope")


def test_beat_runs_them(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["core-backfills"]
    celery_app.loader.import_default_modules()  # what a worker does at start (task autodiscovery)
    assert entry["task"] == "core.backfills" and entry["task"] in celery_app.tasks
