"""Retention: how long runs and records are kept, and the job that lets them go (issue 36 item 1).

**Windows.** A run, and everything hanging off it (its events, interrupts, A2A messages, push
configs and deliveries; idempotency records keep their own 24 h and lose only the link), is kept
for `runs_days` after it became terminal (`completed_at`). Records (negotiation records and every
other host event) are kept for `records_days` after they were written (`at`). The host's windows are
settings; a tenant's `RetentionPolicy` overrides either, or holds everything (`legal_hold`).

**The job** (`retention_apply`, run by beat and by `manage.py retention apply`) works as if it were
`now`, never later than the real clock, and is idempotent: a second pass at the same instant finds
nothing left to do. In order:

1. Record partitions are created ahead (`records_partitions_ensure`).
2. With an archive configured (OPENWOP_ARCHIVE_URL), every tenant's records that the pass would
   expire and that no export holds yet are exported first (`export_range` from `exported_through`,
   or from the first record, up to the UTC midnight before the tenant's cutoff). A failed export
   refuses the whole pass before anything expires; exports already written stay (the next pass
   starts after them).
3. Records expire (`records_expire`: whole partitions detached and dropped; see
   apps/audit/partitions.py), each tenant's no further than its cutoff and, with an archive, no
   further than what its exports hold.
4. Terminal runs expire, tenant by tenant, in batches of OPENWOP_RETENTION_BATCH_RUNS runs,
   each batch its own short transaction (`FOR UPDATE SKIP LOCKED`: a run a door is touching right
   now waits for the next pass). The run log is append-only by trigger; the one sanctioned way past
   it is this job, which sets `openwop.retention_expiry` for its batch's transaction only (the
   trigger function lets a DELETE through while it is on, migration 0002).
   The batches give way to the doors: each commits without waiting for its WAL flush
   (`synchronous_commit = off` for that transaction: a batch lost in a crash is expired again by
   the next pass), and after each the job rests so that it works at most
   OPENWOP_RETENTION_RUNS_DUTY of the time (bench/README.md §retention measured why).
5. The tables the pass changed are maintained at once rather than at autovacuum's leisure
   (issue 51 item 4): each table it deleted rows from (the run log's tables, a record partition
   emptied in batches) is VACUUMed (plain, with ANALYZE; SKIP_LOCKED: one a vacuum already holds is
   left to it), outside any transaction (VACUUM cannot run in one: inside one, as in a test, it is
   reported skipped and only ANALYZE runs); a replacement partition is ANALYZEd, and so is the
   records' parent when its partitions changed (`ANALYZE ONLY`, PostgreSQL 17 and later: the
   parent's own statistics, which autovacuum never gathers; not before 17, where it would
   re-analyze every partition).

An expired run is gone: every door answers for it exactly as for a task that never existed.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import ForeignObjectRel
from django.utils import timezone

from apps.audit.archive import archive_url_configured, export_range, exported_through
from apps.audit.partitions import PARENT as PARENT_TABLE
from apps.audit.partitions import RecordsExpiry, records_expire, records_partitions_ensure
from apps.core.append_only import RETENTION_EXPIRY_SETTING
from apps.core.async_db import direct_session_lock
from apps.core.errors import ValidationFailed
from apps.core.invalidation import TOPIC_FACET, acached, cached, invalidate_on_commit
from apps.core.jobs import detail_gauges, job_succeeded
from apps.retention.models import RetentionChange, RetentionPolicy
from apps.runs.models import TERMINAL_STATUSES, Run
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

# One pg_advisory_lock key for the job: two passes at once (beat and an operator) never interleave.
APPLY_LOCK_KEY = 0x0_3636_0001
# The job's name (its beat task's): its last pass, beat's or the command's, in JobStatus (apps/core/jobs.py).
RETENTION_JOB = "retention.apply"
# How far ahead of this host's clock `now` may be: a pass never expires what is not yet due.
CLOCK_SKEW = dt.timedelta(seconds=5)
_POLICIES_CACHE_KEY = ("retention", "policies")


class RetentionRefused(Exception):
    """A pass that must not run (an instant in the future, another pass under way, a failed export).
    Nothing has expired when it is raised."""


class _Unchanged:
    def __repr__(self) -> str:
        return "unchanged"


UNCHANGED: Any = _Unchanged()


@dataclass(frozen=True)
class Retention:
    """A tenant's effective windows (its overrides over the host's) and hold."""

    runs_days: int
    records_days: int
    legal_hold: bool = False

    def runs_cutoff(self, now: dt.datetime) -> dt.datetime | None:
        """Runs terminal before this instant may expire; None: none may (legal hold)."""
        return None if self.legal_hold else now - dt.timedelta(days=self.runs_days)

    def records_cutoff(self, now: dt.datetime) -> dt.datetime | None:
        """Records written before this instant may expire; None: none may (legal hold)."""
        return None if self.legal_hold else now - dt.timedelta(days=self.records_days)

    @property
    def run_ttl_ms(self) -> int | None:
        """An MCP task's `ttlMs`: the run retention, null while the tenant is held."""
        return None if self.legal_hold else self.runs_days * 86_400_000


def host_retention() -> Retention:
    return Retention(
        runs_days=settings.OPENWOP_RETENTION_RUNS_DAYS, records_days=settings.OPENWOP_RETENTION_RECORDS_DAYS
    )


def _effective(policy: RetentionPolicy | None, host: Retention) -> Retention:
    if policy is None:
        return host
    return Retention(
        runs_days=policy.runs_days or host.runs_days,
        records_days=policy.records_days or host.records_days,
        legal_hold=policy.legal_hold,
    )


def retention_of(tenant: Tenant | int) -> Retention:
    """The tenant's effective retention, read from the database."""
    tenant_pk = tenant.pk if isinstance(tenant, Tenant) else tenant
    return _effective(RetentionPolicy.objects.filter(tenant_id=tenant_pk).first(), host_retention())


def _policies() -> dict[int, RetentionPolicy]:
    return {p.tenant_id: p for p in RetentionPolicy.objects.all()}


def retentions_by_tenant() -> dict[int, Retention]:
    """Every tenant's effective retention, one query."""
    host, policies = host_retention(), _policies()
    return {pk: _effective(policies.get(pk), host) for pk in Tenant.objects.values_list("pk", flat=True)}


def run_ttl_ms(tenant_pk: int) -> int | None:
    """`ttlMs` of an MCP task of this tenant (its run retention; null under a legal hold), from this
    process's cache of the (few) policy rows, which every write to the policy table empties in
    every process (its trigger notifies the `facet` topic, the per-tenant policies', migration 0002)."""
    policies = cached(TOPIC_FACET, _POLICIES_CACHE_KEY, _policies)
    return _effective(policies.get(tenant_pk), host_retention()).run_ttl_ms


async def arun_ttl_ms(tenant_pk: int) -> int | None:
    """`run_ttl_ms` from the event loop: a hit awaits nothing; a miss reads on a thread."""
    policies = await acached(TOPIC_FACET, _POLICIES_CACHE_KEY, sync_to_async(_policies))
    return _effective(policies.get(tenant_pk), host_retention()).run_ttl_ms


# --- policy writes (audited) -------------------------------------------------------------------


def policy_fields(policy: RetentionPolicy | None) -> dict[str, Any]:
    """The audited shape of a tenant's policy; no row is the host's windows and no hold."""
    policy = policy or RetentionPolicy()  # a new row's fields: the host's windows, no hold
    return {"runs_days": policy.runs_days, "records_days": policy.records_days, "legal_hold": policy.legal_hold}


def _days_valid(value: Any) -> bool:
    """A window in days: None is the host's, UNCHANGED leaves it; otherwise a whole number >= 1."""
    if value is None or value is UNCHANGED:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def retention_set(
    *,
    tenant: Tenant,
    actor: str,
    runs_days: int | None = UNCHANGED,
    records_days: int | None = UNCHANGED,
    legal_hold: bool = UNCHANGED,
) -> RetentionPolicy:
    """Change the named fields of a tenant's policy (None days: back to the host's), audited in the
    same transaction. Raises ValidationFailed naming every broken rule; a change to nothing writes
    nothing."""
    wanted = {"runs_days": runs_days, "records_days": records_days, "legal_hold": legal_hold}
    errors = {
        name: [f"{name} is a whole number of days, at least 1 (or empty for the host's)."]
        for name in ("runs_days", "records_days")
        if not _days_valid(wanted[name])
    }
    if errors:
        raise ValidationFailed(" ".join(m for ms in errors.values() for m in ms), details={"fields": errors})
    # Not durable: the admin calls this inside its own change-form transaction.
    with transaction.atomic():
        policy = RetentionPolicy.objects.select_for_update().filter(tenant=tenant).first()
        before = policy_fields(policy)
        if policy is None:
            policy = RetentionPolicy(tenant=tenant)
        for name, value in wanted.items():
            if value is not UNCHANGED:
                setattr(policy, name, bool(value) if name == "legal_hold" else value)
        after = policy_fields(policy)
        if after == before:
            return policy
        policy.save()
        RetentionChange.objects.create(tenant_slug=tenant.slug, actor=actor, before=before, after=after)
        # The table's trigger empties every process's caches; this one does not wait for it.
        invalidate_on_commit(TOPIC_FACET)
    return policy


def retention_clear(*, tenant: Tenant, actor: str) -> bool:
    """Remove a tenant's policy (the host's windows again, no hold); audited. False when there was none."""
    with transaction.atomic():
        policy = RetentionPolicy.objects.select_for_update().filter(tenant=tenant).first()
        if policy is None:
            return False
        before = policy_fields(policy)
        policy.delete()
        RetentionChange.objects.create(tenant_slug=tenant.slug, actor=actor, before=before, after=policy_fields(None))
        invalidate_on_commit(TOPIC_FACET)
    return True


# --- the job -----------------------------------------------------------------------------------


@dataclass
class RetentionReport:
    """What one pass did: enough for the command's output, the beat task's log and the bench."""

    now: dt.datetime
    partitions_created: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)
    records: RecordsExpiry = field(default_factory=RecordsExpiry)
    runs_expired: int = 0
    run_batches: int = 0
    held_tenants: list[str] = field(default_factory=list)
    vacuumed: list[str] = field(default_factory=list)
    analyzed: list[str] = field(default_factory=list)
    vacuum_skipped: bool = False  # the pass ran inside a transaction: VACUUM cannot
    seconds: float = 0.0

    def counts(self) -> dict[str, float]:
        """What the pass expired and kept, as numbers (JobStatus.detail: /metrics' readings)."""
        return {
            "runs": self.runs_expired, "records_deleted": self.records.deleted,
            "partitions_dropped": len(self.records.dropped), "records_moved_aside": self.records.moved_aside,
            "partitions_held": len(self.records.held), "seconds": round(self.seconds, 3),
        }  # fmt: skip

    def lines(self) -> list[str]:
        return [
            f"retention applied as of {self.now.isoformat()} in {self.seconds:.2f} s",
            f"partitions created ahead: {', '.join(self.partitions_created) or 'none'}",
            f"exports written: {', '.join(self.exports) or 'none'}",
            f"records: {len(self.records.dropped)} partitions dropped ({', '.join(self.records.dropped) or '-'}),"
            f" {self.records.moved_aside} records moved aside (kept: a hold, a longer window),"
            f" {self.records.deleted} records deleted in batches, {len(self.records.held)} past partitions held,"
            f" {len(self.records.busy)} busy (next pass)",
            f"runs expired: {self.runs_expired} in {self.run_batches} batches",
            f"tenants on legal hold: {', '.join(self.held_tenants) or 'none'}",
            f"vacuumed: {', '.join(self.vacuumed) or 'none'}{' (skipped: inside a transaction)' * self.vacuum_skipped};"
            f" analyzed: {', '.join(self.analyzed) or 'none'}",
        ]


def retention_apply(now: dt.datetime) -> RetentionReport:
    """One pass of the job as of `now` (see the module docstring). Raises RetentionRefused."""
    if timezone.is_naive(now):
        raise RetentionRefused("the instant needs a UTC offset")
    if now > timezone.now() + CLOCK_SKEW:
        raise RetentionRefused(f"{now.isoformat()} is in the future: nothing expires before its time")
    started = time.monotonic()
    report = RetentionReport(now=now)
    with _apply_lock():
        retentions = retentions_by_tenant()
        slugs = dict(Tenant.objects.values_list("pk", "slug"))
        report.held_tenants = sorted(slugs[pk] for pk, r in retentions.items() if r.legal_hold)
        _records_pass(now, retentions, slugs, report)
        _runs_pass(now, retentions, settings.OPENWOP_RETENTION_BATCH_RUNS, report)
        _maintain(report)
    report.seconds = time.monotonic() - started
    logger.info("; ".join(report.lines()))
    job_succeeded(RETENTION_JOB, report.counts())  # /metrics: the last pass and what it expired
    return report


def retention_gauges() -> Iterator[Any]:
    """/metrics at scrape time: when the last pass (beat's or `manage.py retention apply`'s) ended
    and what it expired."""
    yield from detail_gauges(RETENTION_JOB, prefix="openwop_retention_last_pass", what="a retention pass", counts={
        "runs_expired": ("runs", "Runs the last retention pass expired."),
        "records_deleted": ("records_deleted", "Records the last retention pass deleted row by row."),
        "partitions_dropped": ("partitions_dropped", "Record partitions the last retention pass dropped whole."),
        "records_moved_aside": ("records_moved_aside", "Kept records the last pass moved out of dropped partitions."),
        "partitions_held": ("partitions_held", "Past record partitions the last pass kept (held)."),
        "duration_seconds": ("seconds", "How long the last retention pass took."),
    })  # fmt: skip


@contextmanager
def _apply_lock() -> Iterator[None]:
    """A session advisory lock held for the whole pass (its batches commit one by one); behind a
    transaction pooler, on a direct connection of its own (apps/core/async_db.direct_session_lock)."""
    if settings.OPENWOP_DB_TRANSACTION_POOLER:
        with direct_session_lock(APPLY_LOCK_KEY, "openwop-retention-lock") as taken:
            if not taken:
                raise RetentionRefused("another retention pass is under way")
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [APPLY_LOCK_KEY])
        if not cursor.fetchone()[0]:
            raise RetentionRefused("another retention pass is under way")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [APPLY_LOCK_KEY])


def _records_pass(
    now: dt.datetime, retentions: dict[int, Retention], slugs: dict[int, str], report: RetentionReport
) -> None:
    report.partitions_created = records_partitions_ensure(now)
    cutoffs = {pk: r.records_cutoff(now) for pk, r in retentions.items()}
    if archive_url_configured():
        cutoffs = _export_first(cutoffs, slugs, report)
    report.records = records_expire(now, keep=lambda tenant_pk: cutoffs.get(tenant_pk))


def _export_first(
    cutoffs: dict[int, dt.datetime | None], slugs: dict[int, str], report: RetentionReport
) -> dict[int, dt.datetime | None]:
    """Step 2 of the module docstring (up to a UTC midnight: one export a day per tenant, however
    often the job runs); the cutoffs, clipped to what the exports now hold."""
    clipped: dict[int, dt.datetime | None] = {}
    for tenant_pk, cutoff in cutoffs.items():
        if cutoff is None:
            clipped[tenant_pk] = None
            continue
        through = exported_through(tenant_pk)
        until = cutoff.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        if through is None or through < until:
            try:
                export = export_range(tenant=Tenant.objects.get(pk=tenant_pk), since=through, until=until)
            except Exception as exc:
                raise RetentionRefused(f"the export of {slugs[tenant_pk]}'s records failed: {exc}") from exc
            report.exports.append(export.file_url)
            through = exported_through(tenant_pk)
        clipped[tenant_pk] = None if through is None else min(cutoff, through)
    return clipped


def _runs_pass(now: dt.datetime, retentions: dict[int, Retention], batch: int, report: RetentionReport) -> None:
    for tenant_pk, retention in sorted(retentions.items()):
        cutoff = retention.runs_cutoff(now)
        if cutoff is None:
            continue
        while True:
            started = time.monotonic()
            expired = runs_expire_batch(tenant_pk=tenant_pk, cutoff=cutoff, limit=batch)
            if not expired:
                break
            report.runs_expired += expired
            report.run_batches += 1
            time.sleep(batch_rest(time.monotonic() - started, settings.OPENWOP_RETENTION_RUNS_DUTY))


_TABLE_OF = re.compile(r'^(?:DELETE FROM|UPDATE) ("[^"]+"|\S+)')


def _maintain(report: RetentionReport) -> None:
    """Step 5 of the module docstring."""
    records = report.records
    vacuum = list(records.deleted_from)
    if report.runs_expired:
        for statement in _run_purge_statements():
            table = _TABLE_OF.match(statement).group(1).strip('"')  # type: ignore[union-attr]
            if table not in vacuum:
                vacuum.append(table)
    analyze = list(records.created)
    if (records.dropped or records.deleted or records.created) and getattr(connection, "pg_version", 0) >= 170000:
        analyze.append(f"ONLY {PARENT_TABLE}")
    quote = connection.ops.quote_name
    report.vacuum_skipped = bool(vacuum) and connection.in_atomic_block
    with connection.cursor() as cursor:
        for table in vacuum:
            if report.vacuum_skipped:
                cursor.execute(f"ANALYZE {quote(table)}")
                report.analyzed.append(table)
            else:
                cursor.execute(f"VACUUM (ANALYZE, SKIP_LOCKED) {quote(table)}")
                report.vacuumed.append(table)
        for table in analyze:
            cursor.execute(f"ANALYZE {table if table.startswith('ONLY ') else quote(table)}")
            report.analyzed.append(table)


def batch_rest(worked: float, duty: float) -> float:
    """How long to rest after a batch that took `worked` seconds, so the job works `duty` of the
    time (1: no rest)."""
    return worked * (1 - duty) / duty


def runs_expire_batch(*, tenant_pk: int, cutoff: dt.datetime, limit: int) -> int:
    """Delete up to `limit` of the tenant's runs terminal before `cutoff`, with all that hangs off
    them, in one short transaction; how many went.

    Read through the (tenant, status, updated_at) index: a terminal run's `updated_at` is at or
    after its `completed_at`, so `updated_at < cutoff` finds only runs that are due (a run touched
    after it ended waits until that touch is as old). In no order: the scan stops at `limit` rows
    instead of sorting every due run on every batch."""
    with transaction.atomic(durable=True):
        due = (
            Run.unscoped_all_tenants.filter(
                tenant_id=tenant_pk,
                status__in=sorted(TERMINAL_STATUSES),
                updated_at__lt=cutoff,
                completed_at__lt=cutoff,
            )
            .order_by()
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        ids = list(due)
        if not ids:
            return 0
        with connection.cursor() as cursor:  # this transaction only: see the module docstring
            cursor.execute("SET LOCAL synchronous_commit = off")
        with _run_log_deletes_sanctioned(), connection.cursor() as cursor:
            for statement in _run_purge_statements():
                cursor.execute(statement, {"ids": ids})
    return len(ids)


@cache
def _run_purge_statements() -> tuple[str, ...]:
    """The statements deleting the runs whose ids are `%(ids)s` and everything that hangs off
    them, children first: what Django's on_delete rules say (CASCADE deletes, SET_NULL unlinks),
    read from the models, so a relation added later is followed too. Set-based: a batch costs a
    statement per table, not a fetch of every event's id (the ORM's collector: 20x slower).

    A run's direct children are selected by the ids themselves (`run_id = ANY(%(ids)s)`), not
    through a subquery on `runs_run`: with the subquery PostgreSQL may hash-join the whole event
    table (it did on 80k events: a sequential scan of every event, live and dead, on every batch,
    so a batch's cost grew with the table); with the array it reads the run_id index."""
    return tuple(_purge_statements(Run, "id = ANY(%(ids)s)", pks="%(ids)s"))


def _purge_statements(model: type[models.Model], where: str, pks: str | None = None) -> list[str]:
    """`pks`: when `where` selects exactly the rows whose primary key is in this array."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    statements: list[str] = []
    # Reverse relations, hidden ones too (`related_name="+"`: push deliveries, A2A messages...).
    relations = [f for f in model._meta.get_fields(include_hidden=True) if f.auto_created and not f.concrete]
    for relation in relations:
        if not isinstance(relation, ForeignObjectRel) or relation.many_to_many:
            continue
        child, field = relation.related_model, relation.field
        column, parent_key = quote(str(field.column)), quote(str(field.target_field.column))
        if pks is not None and field.target_field.primary_key:
            selector = f"{column} = ANY({pks})"
        else:
            selector = f"{column} IN (SELECT {parent_key} FROM {table} WHERE {where})"  # noqa: S608
        if relation.on_delete is models.CASCADE:
            statements += _purge_statements(child, selector)
        elif relation.on_delete is models.SET_NULL:
            statements.append(f"UPDATE {quote(child._meta.db_table)} SET {column} = NULL WHERE {selector}")  # noqa: S608
        # PROTECT and the rest: the foreign key refuses the batch, which rolls back whole.
    statements.append(f"DELETE FROM {table} WHERE {where}")  # noqa: S608
    return statements


@contextmanager
def _run_log_deletes_sanctioned() -> Iterator[None]:
    """The run log's trigger lets DELETEs through inside this block only: the setting is local to
    the transaction (`set_config(..., true)`) and switched off again before anything else runs in it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'on', true)", [RETENTION_EXPIRY_SETTING])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, 'off', true)", [RETENTION_EXPIRY_SETTING])
