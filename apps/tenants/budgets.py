"""A tenant's budgets as they bind now: its TenantBudget override, else the host's default
(DESIGN.md §Many tenants, many days; docs/operators/tenant-budgets.md).

`tenant_budget(tenant_pk)` is the one resolver every enforcer reads. The row is kept per process
(apps/core/invalidation.py, topic `budget`: the table's trigger empties it in every process on any
write, the admin's and the command's included), so a hot path pays no query per call; the host's
defaults are read from settings at each call, so they are never stale either.

What this module enforces itself: the per-tenant window of runs accepted per minute (a fixed
one-minute window counted in the cache, Redis when REDIS_URL is set, by apps/core/rate_limits.py
as it counts a key's requests) and the active API keys (`api_keys_admit`). Runs queued are counted by the
app that owns runs (apps/runs/budgets.py). Every refusal is `budget_refused`: a RateLimited naming
the budget and its limit, counted in /metrics. Like the per-key limits, the window fails open when
the cache is unreachable (availability of the wire outranks the ceiling).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core import metrics
from apps.core.errors import RateLimited
from apps.core.invalidation import TOPIC_BUDGET, acached, cached
from apps.core.rate_limits import LimitSettings, request_admit, request_admit_async
from apps.tenants.models import ApiKey, Tenant, TenantBudget

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
# Retry-After of a refusal that no window ends: a backlog drains, a key is revoked.
QUEUED_RETRY_AFTER_SECONDS = 5
API_KEYS_RETRY_AFTER_SECONDS = 60


@dataclass(frozen=True, slots=True)
class TenantBudgets:
    """Effective limits of one tenant; 0 = unlimited. Field names are TenantBudget's."""

    requests_per_minute: int
    streams: int
    runs_per_minute: int
    runs_queued: int
    runs_in_progress: int
    api_keys: int


BUDGET_NAMES: tuple[str, ...] = tuple(f.name for f in fields(TenantBudgets))

# Each budget's host default. requests_per_minute and streams are enforced at the edge (the request
# middleware); their settings are read here when the host defines them, else unlimited.
DEFAULT_SETTINGS: dict[str, str] = {
    "requests_per_minute": "OPENWOP_TENANT_REQUESTS_PER_MINUTE",
    "streams": "OPENWOP_TENANT_STREAMS",
    "runs_per_minute": "OPENWOP_TENANT_RUNS_PER_MINUTE",
    "runs_queued": "OPENWOP_TENANT_RUNS_QUEUED",
    "runs_in_progress": "OPENWOP_TENANT_RUNS_IN_PROGRESS",
    "api_keys": "OPENWOP_TENANT_API_KEYS",
}

Overrides = tuple[int | None, ...]  # the row's fields in BUDGET_NAMES order; None = the default
_NO_OVERRIDES: Overrides = (None,) * len(BUDGET_NAMES)


def budget_default(name: str) -> int:
    """The host's default for budget `name` (settings), 0 = unlimited."""
    return int(getattr(settings, DEFAULT_SETTINGS[name], 0) or 0)


def _overrides_load(tenant_pk: int) -> Overrides:
    row = TenantBudget.objects.filter(tenant_id=tenant_pk).values_list(*BUDGET_NAMES).first()
    return tuple(row) if row is not None else _NO_OVERRIDES


def _effective(overrides: Overrides) -> TenantBudgets:
    values = {
        name: budget_default(name) if value is None else int(value)
        for name, value in zip(BUDGET_NAMES, overrides, strict=True)
    }
    return TenantBudgets(**values)


def tenant_budget_overrides(tenant_pk: int) -> dict[str, int | None]:
    """The tenant's own overrides by budget name (None: the host default), from the same cached
    row `tenant_budget` reads (no query while it is cached)."""
    overrides = cached(TOPIC_BUDGET, tenant_pk, lambda: _overrides_load(tenant_pk))
    return dict(zip(BUDGET_NAMES, overrides, strict=True))


def tenant_budget(tenant_pk: int) -> TenantBudgets:
    """The tenant's effective budgets: its override where it set one, else the host's default."""
    return _effective(cached(TOPIC_BUDGET, tenant_pk, lambda: _overrides_load(tenant_pk)))


async def atenant_budget(tenant_pk: int) -> TenantBudgets:
    """`tenant_budget` from the event loop: a hit awaits nothing, a miss reads on a thread."""
    overrides = await acached(TOPIC_BUDGET, tenant_pk, lambda: sync_to_async(_overrides_load)(tenant_pk))
    return _effective(overrides)


def budget_refused(*, budget: str, limit: int, retry_after: int, tenant: str) -> RateLimited:
    """The refusal of a tenant past `budget` (429 rate_limited, Retry-After, details naming the
    budget), counted in /metrics. Raise it before anything is written."""
    metrics.budget_refused(budget, tenant)
    return RateLimited(
        f"The tenant's {budget.replace('_', ' ')} budget ({limit}) is spent; retry later.",
        retry_after=retry_after,
        details={"budget": budget, "limit": limit},
    )


# ---------------------------------------------------------------------------------------------
# Runs accepted per minute: the per-key limits' window counter (apps/core/rate_limits.py), on a
# bucket of the tenant's own: the same cache client, RESP round trip and failing open.


def _window(tenant_pk: int, limit: int) -> tuple[str, LimitSettings]:
    # STYLE.md habit 10: a cache key across processes names its tenant. A pk is only unique within
    # its database: the name keeps two hosts (or test databases) sharing one Redis apart.
    database = settings.DATABASES["default"].get("NAME", "")
    return f"tenant-runs:{database}:{tenant_pk}", LimitSettings(
        requests=limit, window_seconds=WINDOW_SECONDS, streams=0
    )


def _window_refusal(retry_after: int | None, limit: int, tenant: str) -> None:
    if retry_after is not None:
        raise budget_refused(budget="runs_per_minute", limit=limit, retry_after=retry_after, tenant=tenant)


def runs_per_minute_admit(*, tenant_pk: int, tenant: str, limit: int) -> None:
    """Count one run accepted in the tenant's current minute; RateLimited past `limit` (0: none)."""
    if limit > 0:
        _window_refusal(request_admit(*_window(tenant_pk, limit)), limit, tenant)


async def runs_per_minute_admit_async(*, tenant_pk: int, tenant: str, limit: int) -> None:
    """`runs_per_minute_admit` from the event loop (one round trip with Redis)."""
    if limit > 0:
        _window_refusal(await request_admit_async(*_window(tenant_pk, limit)), limit, tenant)


# ---------------------------------------------------------------------------------------------
# API keys


def api_keys_admit(*, tenant: Tenant) -> None:
    """Refuse one more key past the tenant's active-key budget. Called inside the minting
    transaction after locking the tenant row, so two mints cannot both take the last slot."""
    limit = tenant_budget(tenant.pk).api_keys
    if limit <= 0:
        return
    active = ApiKey.objects.for_tenant(tenant).filter(revoked_at__isnull=True)[:limit].count()
    if active >= limit:
        raise budget_refused(
            budget="api_keys", limit=limit, retry_after=API_KEYS_RETRY_AFTER_SECONDS, tenant=tenant.slug
        )
