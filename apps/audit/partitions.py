"""Time partitions of the records (issue 36 item 2): `audit_hostevent` is partitioned by RANGE (at).

The table (migration 0010) is PostgreSQL declarative partitioning: one partition per interval
(`OPENWOP_RECORDS_PARTITION_INTERVAL`: daily by default, weekly or monthly; UTC boundaries),
named `audit_hostevent_p<first day, YYYYMMDD>`, and a DEFAULT partition that catches a record no
partition covers (an instant before the migration, or the beat job stopped), so a write never
fails for want of a partition. The parent's constraints, indexes and triggers (append-only, the
daily rollups) apply to every partition.

- `records_partitions_ensure(now)` (the beat job) creates the partitions of the next intervals
  ahead. Each is created standalone and ATTACHed, which locks the parent only in SHARE UPDATE
  EXCLUSIVE mode (writers go on); a range whose records already sit in the default partition is
  left there (reported), as attaching it would fail.
- `records_expire(now, keep=...)` drops a past partition whole (DETACH, then DROP: no DELETE scan,
  no dead tuples) when every tenant with records in it may lose them (`keep(tenant_pk)` is the
  instant before which that tenant's records may go; None is a legal hold). A partition some
  tenants still need (a hold, a longer window) is replaced when their records are at most
  KEPT_SHARE of it: those records are copied as they are into `audit_hostevent_h<first day>_<n>`,
  which takes the old partition's range in the DETACH's transaction, and the old one is dropped
  whole (issue 51 item 4; `_replace`). Otherwise it is kept, and the records in it of tenants
  whose window is shorter are deleted in bounded batches (BATCH rows a transaction, the sanctioned
  path past the append-only trigger), as are expired records in the default partition.
  DETACH takes the parent's ACCESS EXCLUSIVE lock for a catalog change and the move of the
  partition's streams' anchors (computed before, applied in the same transaction); it waits at
  most LOCK_TIMEOUT and is retried at the next run rather than queueing writers behind it.

- `records_default_repair(now)` (`manage.py records_partitions repair`) moves the records that
  landed in the default partition (the beat job stopped for longer than
  OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS) into partitions of their own, as they are, one
  transaction per interval; the interval being written now waits until it has ended.

A stream only ever loses a front of its records, and only chained ones: its anchor
(`expired_through` / `expired_digest`) moves to its last expired record in the same transaction
that removes them, and no record at or below the anchor stays, so `audit_verify` proves the kept
records from the anchor and treats any record below it as a finding (apps/audit/verify.py). A
partition whose records would not be a front for some stream (a record of that stream written a
few milliseconds across the bound with an earlier sequence, or one in a partition still held) is
emptied in batches instead, front first, the rest going when what precedes it does. The chainer
runs first: a record not yet chained does not expire.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache

from django.conf import settings
from django.db import OperationalError, connection, transaction

from apps.audit.chain import chained_head_sql
from apps.audit.chainer import chain_pending
from apps.audit.models import HostEvent, HostEventStream
from apps.core.append_only import RETENTION_EXPIRY_SETTING

logger = logging.getLogger(__name__)

PARENT = HostEvent._meta.db_table
DEFAULT = f"{PARENT}_default"
_STREAMS = HostEventStream._meta.db_table
BATCH = 5000  # rows per transaction when records are deleted rather than dropped
KEPT_SHARE = 0.5  # a partition is replaced (its kept records moved aside) when they are at most this share
LOCK_TIMEOUT = "500ms"  # the longest DETACH may keep writers queued behind its lock request
INTERVALS = ("daily", "weekly", "monthly")
_BOUNDS = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    lower: datetime
    upper: datetime


@dataclass(slots=True)
class RecordsExpiry:
    """What one `records_expire` run did."""

    dropped: list[str] = field(default_factory=list)  # partitions detached and dropped whole
    held: list[str] = field(default_factory=list)  # past partitions kept: a tenant still keeps records there
    busy: list[str] = field(default_factory=list)  # droppable, but DETACH timed out waiting: next run
    deleted: int = 0  # records deleted in batches (tenants with a shorter window than their neighbours)
    moved_aside: int = 0  # kept records copied into replacements of dropped partitions (a hold, a longer window)
    deleted_from: list[str] = field(default_factory=list)  # tables records were deleted from (to vacuum)
    created: list[str] = field(default_factory=list)  # replacement partitions (to analyze)
    streams_anchored: int = 0  # stream anchors moved forward


def partition_interval() -> str:
    interval = settings.OPENWOP_RECORDS_PARTITION_INTERVAL
    if interval not in INTERVALS:
        raise ValueError(f"OPENWOP_RECORDS_PARTITION_INTERVAL must be one of {', '.join(INTERVALS)}: {interval!r}")
    return interval


def interval_floor(at: datetime, interval: str) -> datetime:
    """The start (UTC midnight) of the interval holding `at`: the day, the ISO week (Monday), the month."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if interval == "weekly":
        return day - timedelta(days=day.weekday())
    if interval == "monthly":
        return day.replace(day=1)
    return day


def interval_next(start: datetime, interval: str) -> datetime:
    if interval == "weekly":
        return start + timedelta(days=7)
    if interval == "monthly":
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start + timedelta(days=1)


def partitions() -> list[Partition]:
    """The parent's range partitions (not the default one), oldest first, from the catalog."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits AS i"
            " JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [PARENT],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUNDS.search(bound)
        if match:  # the default partition's bound is DEFAULT
            lower, upper = (datetime.fromisoformat(value).astimezone(UTC) for value in match.groups())
            found.append(Partition(name, lower, upper))
    return sorted(found, key=lambda p: p.lower)


def records_partitions_ensure(now: datetime, *, since: datetime | None = None) -> list[str]:
    """Create the partitions from the interval holding `since` (default `now`) through the one
    holding `now` + OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS (a beat down for that long still finds a
    partition for every record; issue 51 item 4); return the names created. Idempotent: a range an
    existing partition covers is skipped, and a gap between partitions of a former interval setting
    is filled up to the next existing one."""
    interval = partition_interval()
    existing = partitions()
    cursor_at = interval_floor(since or now, interval)
    ahead = timedelta(days=settings.OPENWOP_RECORDS_PARTITIONS_AHEAD_DAYS)
    horizon = interval_next(interval_floor(now + ahead, interval), interval)
    created: list[str] = []
    while cursor_at < horizon:
        covering = next((p for p in existing if p.lower <= cursor_at < p.upper), None)
        if covering is not None:
            cursor_at = covering.upper
            continue
        boundary = interval_next(interval_floor(cursor_at, interval), interval)
        upper = min([boundary] + [p.lower for p in existing if p.lower > cursor_at])
        name = f"{PARENT}_p{cursor_at:%Y%m%d}"
        if _create_partition(name, cursor_at, upper):
            created.append(name)
            existing.append(Partition(name, cursor_at, upper))
        cursor_at = upper
    return created


def _create_partition(name: str, lower: datetime, upper: datetime) -> bool:
    """Create `name` for [lower, upper) and attach it; False (and nothing created) if the default
    partition already holds records of that range."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {DEFAULT} WHERE at >= %s AND at < %s)", [lower, upper])  # noqa: S608
        if cursor.fetchone()[0]:
            logger.warning("records: %s not created, the default partition holds records of its range", name)
            return False
        # LIKE copies columns, defaults and CHECKs; ATTACH adds the parent's indexes, keys, foreign
        # key and triggers. The bound's CHECK lets ATTACH skip its validation scan.
        cursor.execute(f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cursor.execute(f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound CHECK (at >= %s AND at < %s)", [lower, upper])
        cursor.execute(f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [lower, upper])
        cursor.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound")
    return True


def records_expire(now: datetime, *, keep: Callable[[int], datetime | None]) -> RecordsExpiry:
    """Expire the records each tenant's window lets go (see the module docstring): whole past
    partitions by DETACH + DROP when all their tenants may lose them and each of their streams
    loses a front, the rest in bounded batches, front first.
    Rollups are not touched (their triggers count inserts only), so the charts keep their numbers."""
    result = RecordsExpiry()
    chain_pending()  # a record expires only once it is chained
    _drop_leftovers(result)
    window = cache(keep)  # asked once per tenant
    # (table, its lower bound) whose rows may still go; the default partition first: what it holds
    # of the past is older than every partition (instants from before the table was partitioned).
    remaining: list[Partition] = [Partition(DEFAULT, _NEVER, _NEVER)]
    for part in partitions():
        if part.lower >= now:
            break
        tenants = _tenants_in(part.name)
        if part.upper <= now:
            expiring = [t for t in tenants if (w := window(t)) is not None and part.upper <= w]
            if len(expiring) == len(tenants):
                outcome = _drop(part, result)
            elif expiring:  # some tenants keep records here: moved aside into a replacement, if few
                kept = [t for t in tenants if t not in expiring]
                outcome, replacement = _replace(part, kept, expiring, result)
                if replacement is not None:
                    part, outcome = replacement, HELD
            else:
                outcome = HELD
            if outcome != HELD:  # dropped, or busy: left whole for the next run, never emptied row by row
                continue
            result.held.append(part.name)
        remaining.append(part)
    stalled: set[int] = set()  # tenants a busy table stopped: none of their later records go this run
    for table in remaining:
        for tenant_pk in _tenants_in(table.name):
            until = window(tenant_pk)
            if tenant_pk in stalled or until is None or (table.name != DEFAULT and table.lower >= until):
                continue
            if not _delete_batched(table, tenant_pk, min(until, now), result):
                stalled.add(tenant_pk)
                if table.name not in result.busy:
                    result.busy.append(table.name)
    return result


def _tenants_in(table: str) -> list[int]:
    """The tenants with records in `table`: a skip scan down the (tenant, subject, sequence, at)
    index, one probe per tenant, however many records."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH RECURSIVE t AS (
                    SELECT min(tenant_id) AS id FROM {table}
                    UNION ALL
                    SELECT (SELECT min(tenant_id) FROM {table} WHERE tenant_id > t.id) FROM t WHERE t.id IS NOT NULL
                ) SELECT id FROM t WHERE id IS NOT NULL"""  # noqa: S608 (our own table names)
        )
        return [row[0] for row in cursor.fetchall()]


# Move each stream's anchor to its last record among `expiring` (rows: tenant_id, subject_id,
# sequence, digest), locking the stream rows in (tenant, subject) order as the writers do.
_ANCHOR_SQL = f"""
WITH heads AS MATERIALIZED (
    SELECT DISTINCT ON (tenant_id, subject_id) tenant_id, subject_id, sequence, digest
    FROM ({{expiring}}) AS e ORDER BY tenant_id, subject_id, sequence DESC
), locked AS MATERIALIZED (
    SELECT s.id, h.sequence, h.digest FROM {_STREAMS} AS s
    JOIN heads AS h ON s.tenant_id = h.tenant_id AND s.subject_id = h.subject_id
    WHERE s.expired_through < h.sequence
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
)
UPDATE {_STREAMS} AS s SET expired_through = l.sequence, expired_digest = l.digest
FROM locked AS l WHERE s.id = l.id AND s.expired_through < l.sequence
"""  # noqa: S608 (our own table names)
_UNNEST = (
    "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[])"
    " AS v(tenant_id, subject_id, sequence, digest)"
)


def _partition_heads_sql(name: str) -> str:
    """Each stream's last record in partition `name` (tenant_id, subject_id, sequence, digest),
    read as a skip scan of its (tenant, subject, sequence) index: one probe to find each next
    stream and one for its last record, so a partition of a million records costs a few hundred
    index probes, not a scan and a sort of every row (that scan was the retention job's heaviest
    moment for the doors: bench/README.md §Session 17)."""
    return f"""
    WITH RECURSIVE streams AS (
        (SELECT tenant_id, subject_id FROM {name} ORDER BY tenant_id, subject_id LIMIT 1)
        UNION ALL
        SELECT n.tenant_id, n.subject_id FROM streams AS s CROSS JOIN LATERAL (
            SELECT tenant_id, subject_id FROM {name}
            WHERE (tenant_id, subject_id) > (s.tenant_id, s.subject_id)
            ORDER BY tenant_id, subject_id LIMIT 1
        ) AS n
    )
    SELECT s.tenant_id, s.subject_id, h.sequence, h.digest FROM streams AS s CROSS JOIN LATERAL (
        SELECT sequence, digest FROM {name}
        WHERE tenant_id = s.tenant_id AND subject_id = s.subject_id ORDER BY sequence DESC LIMIT 1
    ) AS h"""  # noqa: S608 (our own table names)


# The streams of a partition that cannot lose it whole (rows: tenant_id, subject_id, last sequence in
# the partition, its digest): their last record there is not chained yet, or another partition
# still holds one of their records between the anchor and it (a record whose writer took its
# instant after a later record's, a few milliseconds across the bound, or one of a held partition).
# Each probe is a short range scan of the stream's index in the other partitions, which hold
# none or a few of those sequences.
_NOT_A_FRONT_SQL = f"""
SELECT h.tenant_id, h.subject_id FROM ({_UNNEST}) AS h
JOIN {_STREAMS} AS s ON s.tenant_id = h.tenant_id AND s.subject_id = h.subject_id
WHERE h.sequence > {chained_head_sql("s")} OR h.digest = ''
   OR EXISTS (SELECT 1 FROM {PARENT} AS e WHERE e.tenant_id = h.tenant_id AND e.subject_id = h.subject_id
              AND e.sequence > s.expired_through AND e.sequence < h.sequence AND e.at >= %s)
   OR EXISTS (SELECT 1 FROM {PARENT} AS e WHERE e.tenant_id = h.tenant_id AND e.subject_id = h.subject_id
              AND e.sequence > s.expired_through AND e.sequence < h.sequence AND e.at < %s)
LIMIT 1
"""  # noqa: S608 (our own table names)

DROPPED, BUSY, HELD = "dropped", "busy", "held"


def _drop(part: Partition, result: RecordsExpiry) -> str:
    """DETACH and DROP a partition whose every stream loses a front of its records there, its
    streams' anchors moved in the DETACH's own transaction: at no moment does a stream show a
    record at or below its anchor, or a gap after it. HELD when some stream would keep a record
    before one it loses (the rows then go in batches, front first); BUSY when the DETACH timed out
    waiting for the doors' writers (the next run tries again)."""
    with connection.cursor() as cursor:
        cursor.execute(_partition_heads_sql(part.name))
        heads = [list(column) for column in zip(*cursor.fetchall(), strict=True)] or [[], [], [], []]
        cursor.execute(_NOT_A_FRONT_SQL, [*heads, part.upper, part.lower])
        if cursor.fetchone() is not None:
            return HELD
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {part.name}")
            # The heads read above: nothing is written into a past partition's range meanwhile.
            cursor.execute(_ANCHOR_SQL.format(expiring=_UNNEST), heads)
            result.streams_anchored += cursor.rowcount
    except OperationalError as exc:  # lock_not_available: writers were busy; try at the next run
        logger.warning("records: could not detach %s now (%s)", part.name, exc)
        result.busy.append(part.name)
        return BUSY
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {part.name}")
    result.dropped.append(part.name)
    logger.info("records: dropped partition %s", part.name)
    return DROPPED


_KEPT_NAME = re.compile(rf"{PARENT}_h\d{{8}}_(\d+)")


def _replacement_name(part: Partition) -> str:
    """`audit_hostevent_h<first day>_<n>`: n counts the replacements of that range (a replacement
    is replaced in turn when another of its tenants' windows passes)."""
    match = _KEPT_NAME.fullmatch(part.name)
    return f"{PARENT}_h{part.lower:%Y%m%d}_{int(match.group(1)) + 1 if match else 1}"


def _replace(
    part: Partition, kept: list[int], expiring: list[int], result: RecordsExpiry
) -> tuple[str, Partition | None]:
    """Drop a past partition some tenants still keep records in (a legal hold, a longer window):
    their records are copied, byte for byte, into a replacement partition of the same range,
    which takes the old one's place in one transaction (DETACH, ATTACH, the expiring streams'
    anchors moved), and the old one is dropped whole: everyone else's records go without a DELETE.

    The copies keep their ids, instants, sequences and digests, and sit in the same parent, so
    every reader and `audit_verify` sees exactly the records it saw; the kept streams' anchors do
    not move. The copy is written before the swap, into a standalone table (no trigger on it yet:
    the rollups count nothing twice) that carries the parent's indexes and the range's CHECK, so
    ATTACH builds nothing and scans nothing; the swap checks that the old partition holds no kept
    record the copy lacks. Worth it only when the kept records are at most KEPT_SHARE of the
    partition (copying them costs about what deleting as many costs): otherwise, and when a
    stream of an expiring tenant would not lose a front, HELD (the rows go in batches, as before).
    The replacement is returned: what stays in it may still go in batches (a window that ends
    inside the range)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FILTER (WHERE tenant_id = ANY(%s)), count(*) FROM {part.name}",  # noqa: S608
            [kept],
        )
        kept_rows, total = cursor.fetchone()
        if kept_rows > KEPT_SHARE * total:
            return HELD, None
        cursor.execute(_partition_heads_sql(part.name))
        rows = [row for row in cursor.fetchall() if row[0] in expiring]
        heads = [list(column) for column in zip(*rows, strict=True)] or [[], [], [], []]
        cursor.execute(_NOT_A_FRONT_SQL, [*heads, part.upper, part.lower])
        if cursor.fetchone() is not None:
            return HELD, None
    name, columns = _replacement_name(part), _columns()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {name}")  # a copy an interrupted run left: never attached
        cursor.execute(
            f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
        )
        cursor.execute(
            f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound CHECK (at >= %s AND at < %s)", [part.lower, part.upper]
        )
        cursor.execute(
            f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {part.name} WHERE tenant_id = ANY(%s)",  # noqa: S608
            [kept],
        )
        copied = cursor.rowcount
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {part.name}")
            cursor.execute(f"SELECT count(*) FROM {part.name} WHERE tenant_id = ANY(%s)", [kept])  # noqa: S608
            if cursor.fetchone()[0] != copied:  # written meanwhile (an instant across the bound): not now
                raise _CopyStale
            cursor.execute(
                f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [part.lower, part.upper]
            )
            cursor.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound")
            cursor.execute(_ANCHOR_SQL.format(expiring=_UNNEST), heads)
            result.streams_anchored += cursor.rowcount
    except (OperationalError, _CopyStale) as exc:  # lock_not_available: writers were busy; next run
        logger.warning("records: could not replace %s now (%r)", part.name, exc)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {name}")
        result.busy.append(part.name)
        return BUSY, None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {part.name}")
    result.dropped.append(part.name)
    result.created.append(name)
    result.moved_aside += copied
    logger.info("records: dropped partition %s, %d kept records moved aside into %s", part.name, copied, name)
    return DROPPED, Partition(name, part.lower, part.upper)


class _CopyStale(Exception):
    """The partition gained a kept record after the copy was written."""


@cache
def _columns() -> str:
    return ", ".join(connection.ops.quote_name(str(f.column)) for f in HostEvent._meta.concrete_fields)


def _drop_leftovers(result: RecordsExpiry) -> None:
    """Drop partitions a run detached (and anchored) but did not get to drop (it stopped between),
    and a replacement a run filled but did not attach (a copy: the partition it copies is whole)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class AS c WHERE c.relkind = 'r' AND (c.relname LIKE %s OR c.relname LIKE %s)"
            " AND NOT c.relispartition ORDER BY c.relname",
            [f"{PARENT}\\_p%", f"{PARENT}\\_h%"],
        )
        leftovers = [row[0] for row in cursor.fetchall()]
    for name in leftovers:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {name}")
        result.dropped.append(name)
        logger.info("records: dropped partition %s (detached by an earlier run)", name)


# For the streams of one batch from one table: the last sequence that may go, so that a stream only
# ever loses a front of its records: no further than its chain reaches, and before its first record
# that stays in this table (instant at or after `until`) or sits in another table (the bounds of
# this one: `{elsewhere}`), whose turn has not come. A stream with no counter has no chain to keep:
# no bound. Each `min` is one probe of each partition's stream index (the bounds prune the rest).
_FLOORS_SQL = f"""
SELECT s.subject_id, least({chained_head_sql("s")}, least(
    (SELECT min(e.sequence) FROM {PARENT} AS e WHERE e.tenant_id = s.tenant_id AND e.subject_id = s.subject_id
        AND e.sequence > s.expired_through AND e.at >= %(until)s),
    {{elsewhere}}
) - 1)
FROM {_STREAMS} AS s WHERE s.tenant_id = %(tenant)s AND s.subject_id = ANY(%(subjects)s::text[])
"""  # noqa: S608 (our own table names)
_ELSEWHERE = (
    f"(SELECT min(e.sequence) FROM {PARENT} AS e WHERE e.tenant_id = s.tenant_id"  # noqa: S608 (our own table)
    " AND e.subject_id = s.subject_id AND e.sequence > s.expired_through AND {where})"
)
# A range partition's other tables hold the instants outside its bounds; the default partition's,
# the instants of every range partition (it has no bounds to prune by: its own rows are skipped).
_RANGE_FLOORS_SQL = _FLOORS_SQL.format(
    elsewhere=", ".join(_ELSEWHERE.format(where=w) for w in ("e.at < %(lower)s", "e.at >= %(upper)s"))
)
_DEFAULT_FLOORS_SQL = _FLOORS_SQL.format(elsewhere=_ELSEWHERE.format(where=f"e.tableoid <> '{DEFAULT}'::regclass"))
_NEVER = datetime.min.replace(tzinfo=UTC)  # the default partition's (absent) bounds


_DELETE_SQL = "DELETE FROM {table} WHERE (id, at) IN (SELECT * FROM unnest(%s::bigint[], %s::timestamptz[]))"


def _delete_batched(part: Partition, tenant_pk: int, until: datetime, result: RecordsExpiry) -> bool:
    """Delete `tenant_pk`'s records before `until` from one partition, BATCH candidates a
    transaction in stream order, each stream's front only (`_FLOORS_SQL`); False if the partition
    stayed busy (the rest waits for the next run).

    Each transaction reads its batch, moves the anchors of the batch's streams to the last record
    it deletes (locking their rows in (tenant, subject) order, as a writer does), then deletes
    exactly those rows with the retention job's setting on (the append-only trigger lets only that
    transaction's DELETEs through: apps/core/append_only.py). Row locks only: writers and readers of
    the partition go on; it waits at most LOCK_TIMEOUT for a row a writer holds."""
    table, after = part.name, ("", 0)
    floors_sql = _DEFAULT_FLOORS_SQL if table == DEFAULT else _RANGE_FLOORS_SQL
    while True:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"""SELECT id, at, tenant_id, subject_id, sequence, digest FROM {table}
                        WHERE tenant_id = %s AND at < %s AND (subject_id, sequence) > (%s, %s)
                        ORDER BY tenant_id, subject_id, sequence LIMIT %s""",  # noqa: S608
                    [tenant_pk, until, *after, BATCH],
                )
                candidates = cursor.fetchall()
                if not candidates:
                    return True
                after = (candidates[-1][3], candidates[-1][4])
                subjects = sorted({row[3] for row in candidates})
                bounds = {"lower": part.lower, "upper": part.upper}
                cursor.execute(floors_sql, {"until": until, "tenant": tenant_pk, "subjects": subjects, **bounds})
                floors = dict(cursor.fetchall())
                rows = [row for row in candidates if row[4] <= floors.get(row[3], row[4])]
                if rows:
                    ids, ats, *stream_columns = (list(column) for column in zip(*rows, strict=True))
                    cursor.execute(_ANCHOR_SQL.format(expiring=_UNNEST), stream_columns)
                    anchored = cursor.rowcount
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    cursor.execute("SELECT set_config(%s, 'on', true)", [RETENTION_EXPIRY_SETTING])
                    cursor.execute(_DELETE_SQL.format(table=table), [ids, ats])
        except OperationalError as exc:  # lock_not_available
            logger.warning("records: could not delete from %s now (%s)", table, exc)
            return False
        if rows:
            result.deleted += len(rows)
            result.streams_anchored += anchored
            if table not in result.deleted_from:
                result.deleted_from.append(table)
        if len(candidates) < BATCH:
            return True


# --- the default partition's records moved into their own partitions (issue 51 item 4) ----------

_FLOOR_SQL = {"daily": "day", "weekly": "week", "monthly": "month"}
LIVE_MARGIN = timedelta(minutes=1)  # a range this close to the clock may still take writes


@dataclass(slots=True)
class DefaultRepair:
    """What one `records_default_repair` did."""

    moved: dict[str, int] = field(default_factory=dict)  # partition created -> records moved into it
    live: list[str] = field(default_factory=list)  # ranges the doors still write into: after they end
    busy: list[str] = field(default_factory=list)  # the default partition was locked: next run
    left: int = 0  # records still in the default partition


class _NothingToMove(Exception):
    pass


def _gaps(lower: datetime, upper: datetime) -> list[tuple[datetime, datetime]]:
    """The parts of [lower, upper) no partition covers (a former interval setting's partitions may
    cover some of it)."""
    gaps, at = [], lower
    for part in partitions():
        if part.upper <= at or part.lower >= upper:
            continue
        if part.lower > at:
            gaps.append((at, part.lower))
        at = max(at, part.upper)
    if at < upper:
        gaps.append((at, upper))
    return gaps


def default_ranges() -> list[tuple[datetime, int]]:
    """(the interval's first instant, records) for each interval the default partition holds
    records of, oldest first: one scan of the default partition, which is meant to be empty."""
    unit = _FLOOR_SQL[partition_interval()]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT date_trunc(%s, at, 'UTC') AS floor, count(*) FROM {DEFAULT} GROUP BY 1 ORDER BY 1",  # noqa: S608
            [unit],
        )
        return list(cursor.fetchall())


def records_default_repair(now: datetime) -> DefaultRepair:
    """Move every record of the default partition into its own interval's partition: for each
    interval it holds records of, a partition is created standalone (the parent's indexes, the
    range's CHECK), filled with those records as they are (every column: ids, instants, sequences,
    digests; no trigger on it yet, so the rollups count nothing twice), the records are deleted
    from the default partition (the sanctioned path past its append-only trigger) and the partition
    is ATTACHed, all in one transaction: a reader sees each record exactly once, before and after,
    and the chain is the same. The range holding `now` (within LIVE_MARGIN) is left: the doors may
    still be writing into it (a write routed to the default partition while its range is attached
    fails); it is moved once it has ended. Idempotent; a range whose lock is not granted within
    LOCK_TIMEOUT is left for the next run."""
    interval, result = partition_interval(), DefaultRepair()
    columns = _columns()
    ranges = [gap for floor, _count in default_ranges() for gap in _gaps(floor, interval_next(floor, interval))]
    for lower, upper in ranges:
        name = f"{PARENT}_p{lower:%Y%m%d}"
        if lower - LIVE_MARGIN <= now < upper + LIVE_MARGIN:
            result.live.append(name)
            continue
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cursor.execute(f"LOCK TABLE {DEFAULT} IN EXCLUSIVE MODE")  # readers go on; writers wait
                cursor.execute(
                    f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
                )
                cursor.execute(
                    f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound CHECK (at >= %s AND at < %s)", [lower, upper]
                )
                cursor.execute(
                    f"INSERT INTO {name} ({columns}) SELECT {columns} FROM {DEFAULT}"  # noqa: S608
                    " WHERE at >= %s AND at < %s",
                    [lower, upper],
                )
                copied = cursor.rowcount
                if not copied:  # a part of the interval that holds none of them
                    raise _NothingToMove
                cursor.execute("SELECT set_config(%s, 'on', true)", [RETENTION_EXPIRY_SETTING])
                cursor.execute(f"DELETE FROM {DEFAULT} WHERE at >= %s AND at < %s", [lower, upper])  # noqa: S608
                if cursor.rowcount != copied:
                    raise OperationalError(f"{copied} records copied, {cursor.rowcount} deleted")
                cursor.execute("SELECT set_config(%s, 'off', true)", [RETENTION_EXPIRY_SETTING])
                cursor.execute(
                    f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [lower, upper]
                )
                cursor.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound")
        except _NothingToMove:
            continue
        except OperationalError as exc:  # lock_not_available
            logger.warning("records: could not move the default partition's records into %s now (%s)", name, exc)
            result.busy.append(name)
            continue
        result.moved[name] = copied
        logger.info("records: %d records moved from the default partition into %s", copied, name)
    if result.moved:  # the new partitions' statistics now; the default partition's dead rows gone
        with connection.cursor() as cursor:
            for name in result.moved:
                cursor.execute(f"ANALYZE {name}")
            if not connection.in_atomic_block:  # VACUUM cannot run in a transaction
                cursor.execute(f"VACUUM (ANALYZE, SKIP_LOCKED) {DEFAULT}")
    result.left = sum(count for _floor, count in default_ranges())
    return result
