"""/metrics' readings of the records (issue 51 item 3), taken at scrape time: the records that sit
in the default partition, and the last pass of the chainer and of `audit_verify` (apps/core/jobs.py).

The default partition should hold nothing: a record lands there only when beat stopped for longer
than partitions are made ahead (`manage.py records_partitions repair` moves them). Counting it is
one bounded read (at most DEFAULT_ROWS_EXACT rows are counted; past that, the planner's estimate),
kept DEFAULT_ROWS_CACHE_SECONDS per process, so a scrape every few seconds costs next to nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from django.db import connection
from prometheus_client.core import GaugeMetricFamily

from apps.audit.chainer import CHAINER_JOB
from apps.audit.partitions import DEFAULT
from apps.core.jobs import detail_gauges

# What `audit_verify` of every tenant records as (JobStatus; the chainer's is chainer.CHAINER_JOB).
VERIFY_JOB = "audit.verify"

DEFAULT_ROWS_EXACT = 100_000
DEFAULT_ROWS_CACHE_SECONDS = 10.0
_COUNT_SQL = f"SELECT count(*) FROM (SELECT 1 FROM {DEFAULT} LIMIT %s) AS capped"  # noqa: S608 (our table)
_ESTIMATE_SQL = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s::regclass"

_cached: tuple[float, int] | None = None
_lock = threading.Lock()


def default_partition_rows() -> int:
    """The records in the default partition: exact up to DEFAULT_ROWS_EXACT, estimated past it."""
    global _cached
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < DEFAULT_ROWS_CACHE_SECONDS:
            return _cached[1]
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL, [DEFAULT_ROWS_EXACT + 1])
        rows = int(cursor.fetchone()[0])
        if rows > DEFAULT_ROWS_EXACT:
            cursor.execute(_ESTIMATE_SQL, [DEFAULT])
            rows = max(rows, int(cursor.fetchone()[0]))
    with _lock:
        _cached = (time.monotonic(), rows)
    return rows


def default_rows_forget() -> None:
    """Drop the cached count (after a repair moved the rows, and in tests)."""
    global _cached
    with _lock:
        _cached = None


def records_gauges() -> Iterator[GaugeMetricFamily]:
    yield GaugeMetricFamily(
        "openwop_records_default_partition_rows",
        "Records in the default partition (should be 0: beat stopped longer than partitions are made ahead;"
        " records_partitions repair moves them). Exact up to 100000, estimated past it.",
        value=default_partition_rows(),
    )
    yield from detail_gauges(CHAINER_JOB, prefix="openwop_audit_chainer_last_pass", what="the record chainer", counts={
        "records_linked": ("linked", "Records the last chainer pass linked into their stream's chain."),
        "streams_behind": ("behind", "Streams the last chainer pass left behind their head (busy, or a gap)."),
    })  # fmt: skip
    yield from detail_gauges(VERIFY_JOB, prefix="openwop_audit_verify_last_pass", what="audit_verify", counts={
        "records": ("records", "Records the last audit_verify of every tenant read and proved or refuted."),
        "streams": ("streams", "Streams the last audit_verify of every tenant checked."),
        "broken_streams": ("broken_streams", "Streams the last audit_verify found broken (0: the chain is intact)."),
    })  # fmt: skip
