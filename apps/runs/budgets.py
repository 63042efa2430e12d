"""A tenant's run budgets, checked by `run_create` before anything is read or written for the run
(apps/tenants/budgets.py resolves them; docs/operators/tenant-budgets.md).

- **runs_queued**: the tenant's runs accepted and not finished that a worker still has to advance
  now: runnable (pending, running, cancelling), leased or due. A run waiting on an interrupt or
  parked on the clock (`wake_at` later, no lease) holds no worker and is not counted. The count
  reads the tenant's own runnable rows through `run_list_by_status` (tenant, status, ...) and stops
  at the limit, so its cost is bounded by the budget, never by another tenant's data. Concurrent
  creates may pass the same last slot (no lock is taken on the hot path): the budget may be
  exceeded by as many creates as race each other, never more. The hot path pays that read only
  near the budget: a process that counted the tenant's backlog under half of it within the last
  QUEUED_MEMO_SECONDS (5 s), its own admissions since included, admits without counting again.
- **runs_per_minute**: apps/tenants/budgets.py's window, counted after runs_queued passed, so a run
  refused for the backlog spends nothing of the minute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from apps.runs.models import RUNNABLE_STATUSES, Run
from apps.tenants.budgets import (
    QUEUED_RETRY_AFTER_SECONDS,
    atenant_budget,
    budget_refused,
    runs_per_minute_admit,
    runs_per_minute_admit_async,
    tenant_budget,
)

# How long a count far below the budget stands in for a new one (module docstring).
QUEUED_MEMO_SECONDS = 5.0

_STATUSES = ", ".join(f"'{status}'" for status in sorted(RUNNABLE_STATUSES))
_QUEUED_SQL = f"""
SELECT count(*) FROM (
    SELECT 1 FROM {Run._meta.db_table} r
    WHERE r.tenant_id = %(tenant)s AND r.status IN ({_STATUSES})
      AND (NOT (r.lease_owner = '') OR r.wake_at <= %(now)s)
    LIMIT %(limit)s
) queued
"""  # noqa: S608 (our own table name and statuses; every value is a parameter)


def runs_queued_count(*, tenant_pk: int, limit: int) -> int:
    """The tenant's queued runs (module docstring), counted up to `limit`."""
    with connection.cursor() as cursor:
        cursor.execute(_QUEUED_SQL, {"tenant": tenant_pk, "now": timezone.now(), "limit": limit})
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@dataclass(slots=True)
class _Counted:
    queued: int  # what the last count found
    at: float  # when (monotonic)
    admitted: int = 0  # runs this process admitted since


# tenant pk -> its last count in this process. Bounded like the other per-process maps.
_counted: dict[int, _Counted] = {}
_MEMO_MAX_TENANTS = 4096


def _queued_far_below(tenant_pk: int, limit: int, now: float) -> bool:
    """Whether this process counted the tenant's backlog within QUEUED_MEMO_SECONDS and found it,
    with what it admitted since, under half the budget: then the hot path skips the count. At half
    the budget or above, every create counts."""
    memo = _counted.get(tenant_pk)
    if memo is None or now - memo.at > QUEUED_MEMO_SECONDS or memo.queued + memo.admitted >= limit // 2:
        return False
    memo.admitted += 1
    return True


def _queued_counted(tenant_pk: int, limit: int, now: float) -> int:
    queued = runs_queued_count(tenant_pk=tenant_pk, limit=limit)
    if len(_counted) >= _MEMO_MAX_TENANTS:
        _counted.clear()
    _counted[tenant_pk] = _Counted(queued=queued, at=now, admitted=1)
    return queued


def run_budgets_admit(*, tenant_pk: int, tenant: str) -> None:
    """Refuse a new run of the tenant past runs_queued or runs_per_minute (RateLimited naming the
    budget); else count it in the minute's window."""
    budgets = tenant_budget(tenant_pk)
    limit = budgets.runs_queued
    now = time.monotonic()
    if limit > 0 and not _queued_far_below(tenant_pk, limit, now) and _queued_counted(tenant_pk, limit, now) >= limit:
        raise budget_refused(budget="runs_queued", limit=limit, retry_after=QUEUED_RETRY_AFTER_SECONDS, tenant=tenant)
    runs_per_minute_admit(tenant_pk=tenant_pk, tenant=tenant, limit=budgets.runs_per_minute)


async def run_budgets_admit_settled(*, tenant_pk: int, tenant: str) -> None:
    """`run_budgets_admit` from the event loop for a run that settles terminal in memory (MCP's
    one-statement path): such a run is never queued, so only the minute's window applies."""
    budgets = await atenant_budget(tenant_pk)
    await runs_per_minute_admit_async(tenant_pk=tenant_pk, tenant=tenant, limit=budgets.runs_per_minute)
