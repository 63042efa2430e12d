"""A tenant's budgets as they bind now: its TenantBudget override, else the host's default
(DESIGN.md §Many tenants, many days; docs/operators/tenant-budgets.md).

`tenant_budget(tenant_pk)` is the one resolver every enforcer reads. The row is kept per process
(apps/core/invalidation.py, topic `budget`: the table's trigger empties it in every process on any
write, the admin's and the command's included), so a hot path pays no query per call; the host's
defaults are read from settings at each call, so they are never stale either.

What this module enforces itself: the per-tenant window of runs accepted per minute (a fixed
one-minute window counted in the cache, Redis when REDIS_URL is set, as apps/core/rate_limits.py
counts a key's requests) and the active API keys (`api_keys_admit`). Runs queued are counted by the
app that owns runs (apps/runs/budgets.py). Every refusal is `budget_refused`: a RateLimited naming
the budget and its limit, counted in /metrics. Like the per-key limits, the window fails open when
the cache is unreachable (availability of the wire outranks the ceiling).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, BaseCache, caches
from django.core.signals import setting_changed
from django.dispatch import receiver

from apps.core import metrics
from apps.core.errors import RateLimited
from apps.core.invalidation import TOPIC_BUDGET, acached, cached
from apps.core.resp import resp_client
from apps.tenants.models import ApiKey, Tenant, TenantBudget

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
# Retry-After of a refusal that no window ends: a backlog drains, a key is revoked.
QUEUED_RETRY_AFTER_SECONDS = 5
API_KEYS_RETRY_AFTER_SECONDS = 60
# After a cache failure the window stays off this long (one connect timeout per interval).
CACHE_RETRY_SECONDS = 5.0


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
# Runs accepted per minute: a fixed window per tenant in the cache

_client: BaseCache | None = None
_cache_retry_at = 0.0
_warned_at = 0.0


def _counters() -> BaseCache:
    """One cache client per process (`django.core.cache.cache` is one per request context)."""
    global _client
    if _client is None:
        _client = caches.create_connection(DEFAULT_CACHE_ALIAS)
    return _client


@receiver(setting_changed)
def _counters_reset(*, setting: str, **kwargs: object) -> None:
    global _client
    if setting == "CACHES":
        _client = None


def _window_key(tenant_pk: int, window: int) -> str:
    # STYLE.md habit 10: a cache key across processes names its tenant. A pk is only unique within
    # its database: the name keeps two hosts (or test databases) sharing one Redis apart.
    database = settings.DATABASES["default"].get("NAME", "")
    return f"openwop:tenant-runs:{database}:{tenant_pk}:{window}"


def _cache_usable() -> bool:
    return time.monotonic() >= _cache_retry_at


def _cache_down(exc: Exception) -> None:
    global _warned_at, _cache_retry_at
    now = time.monotonic()
    _cache_retry_at = now + CACHE_RETRY_SECONDS
    if now - _warned_at > 60:
        _warned_at = now
        logger.warning("tenant run budgets per minute not enforced: the cache is unreachable (%s)",
                       type(exc).__name__)  # fmt: skip


def _window_refusal(count: int, limit: int, now: float, window: int, tenant: str) -> RateLimited | None:
    if count <= limit:
        return None
    retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
    return budget_refused(budget="runs_per_minute", limit=limit, retry_after=retry_after, tenant=tenant)


def runs_per_minute_admit(*, tenant_pk: int, tenant: str, limit: int) -> None:
    """Count one run accepted in the tenant's current minute; RateLimited past `limit` (0: none)."""
    if limit <= 0 or not _cache_usable():
        return
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    key = _window_key(tenant_pk, window)
    try:
        _counters().add(key, 0, timeout=WINDOW_SECONDS + 1)
        count = int(_counters().incr(key))
    except Exception as exc:  # fail open (module docstring)
        _cache_down(exc)
        return
    refusal = _window_refusal(count, limit, now, window, tenant)
    if refusal is not None:
        raise refusal


def _redis_location() -> str | None:
    config = settings.CACHES.get(DEFAULT_CACHE_ALIAS, {})
    if not str(config.get("BACKEND", "")).endswith("RedisCache"):
        return None
    location = config.get("LOCATION")
    return location if isinstance(location, str) else None


async def runs_per_minute_admit_async(*, tenant_pk: int, tenant: str, limit: int) -> None:
    """`runs_per_minute_admit` from the event loop: one RESP round trip on the key the sync path
    uses (apps/core/resp.py), the in-process cache directly, or the sync path on a thread."""
    if limit <= 0 or not _cache_usable():
        return
    location = _redis_location()
    if location is None:  # the local-memory cache: no I/O
        runs_per_minute_admit(tenant_pk=tenant_pk, tenant=tenant, limit=limit)
        return
    options: dict[str, Any] = settings.CACHES[DEFAULT_CACHE_ALIAS].get("OPTIONS", {})
    client = resp_client(
        location, connect_timeout=options.get("socket_connect_timeout"), timeout=options.get("socket_timeout")
    )
    if client is None:
        await sync_to_async(runs_per_minute_admit)(tenant_pk=tenant_pk, tenant=tenant, limit=limit)
        return
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    key = _counters().make_key(_window_key(tenant_pk, window))
    try:
        count = await client.window_incr(key, WINDOW_SECONDS + 1)
    except Exception as exc:  # fail open (module docstring)
        _cache_down(exc)
        return
    refusal = _window_refusal(int(count), limit, now, window, tenant)
    if refusal is not None:
        raise refusal


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
