"""Per-API-key abuse limits kept in the cache: a fixed request window and leased stream slots.

The cache is Redis when REDIS_URL is set (settings.CACHES), so every web process shares the
counters; otherwise Django's local-memory cache, per process. Counters are keyed by an HMAC of the
bearer token, never the token itself and without a database lookup, so a forged or unknown token
costs no query here and nobody can spend another key's budget without holding its secret.

A stream slot is a leased entry, not a counter (see "stream slots" below): the slots of a process
that died free themselves within OPENWOP_STREAM_SLOT_LEASE_SECONDS.

Both limits fail open: with the cache unreachable (Redis down) requests are served unlimited for
CACHE_RETRY_SECONDS before the cache is tried again, and a warning is logged at most once a
minute. Availability of the wire outranks the abuse ceiling. These functions are synchronous (the
cache client is); the middleware calls them off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, BaseCache, caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.crypto import salted_hmac

from apps.core import invalidation
from apps.core.resp import RespClient, resp_client

logger = logging.getLogger(__name__)

_KEY_SALT = "openwop-host.rate-limits"
# After a cache failure the limits stay off this long, so an unreachable Redis costs one connect
# timeout per interval rather than one per request.
CACHE_RETRY_SECONDS = 5.0
_warned_at = 0.0
_cache_retry_at = 0.0


@dataclass(frozen=True, slots=True)
class LimitSettings:
    requests: int  # per window; 0 = unlimited
    window_seconds: int
    streams: int  # concurrent streams per key; 0 = unlimited
    tenant_requests: int = 0  # per window over all of a tenant's keys (the host default); 0 = unlimited
    tenant_streams: int = 0  # open streams over all of a tenant's keys (the host default); 0 = unlimited
    host_streams: int = 0  # open streams in this process, every caller together; 0 = unlimited

    @classmethod
    def current(cls) -> LimitSettings:
        return cls(
            requests=int(getattr(settings, "OPENWOP_RATE_LIMIT_REQUESTS", 0)),
            window_seconds=max(1, int(getattr(settings, "OPENWOP_RATE_LIMIT_WINDOW_SECONDS", 60))),
            streams=int(getattr(settings, "OPENWOP_MAX_STREAMS_PER_KEY", 0)),
            tenant_requests=int(getattr(settings, "OPENWOP_TENANT_REQUESTS_PER_MINUTE", 0)),
            tenant_streams=int(getattr(settings, "OPENWOP_TENANT_STREAMS", 0)),
            host_streams=int(getattr(settings, "OPENWOP_MAX_STREAMS", 0)),
        )


# --- the tenant behind a bucket, learned once its key authenticated in this process ---------------
#
# A tenant's budgets are enforced before authentication, so the tenant of a request must be known
# without a query: the tenants app tells this table, after a key authenticated, which tenant (and
# which budget row) its bucket belongs to (`bucket_tenant_learn`). The entries live in the `apikey`
# topic of the invalidation cache (apps/core/invalidation.py), so a revoked key or an edited tenant
# drops them in every process; a budget edit (no trigger of its own) applies once an entry is
# older than TENANT_LEARNED_SECONDS, when the next authenticated request learns it again. A bucket
# not known yet (the key's first request in this process) is limited per key only.

TENANT_LEARNED_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class BucketTenant:
    """The tenant a bucket's key belongs to, and its own budgets (None: the host default)."""

    pk: int
    slug: str
    requests_per_minute: int | None = None
    streams: int | None = None
    learned_at: float = 0.0  # time.monotonic() when learned

    def requests(self, limits: LimitSettings) -> int:
        return limits.tenant_requests if self.requests_per_minute is None else self.requests_per_minute

    def stream_ceiling(self, limits: LimitSettings) -> int:
        return limits.tenant_streams if self.streams is None else self.streams


def _tenant_entry(bucket: str) -> tuple[str, str]:
    return ("bucket-tenant", bucket)


def bucket_tenant(bucket: str) -> BucketTenant | None:
    """The bucket's tenant when this process learned it (a dict read: no I/O), else None."""
    value, _ = invalidation.lookup(invalidation.TOPIC_APIKEY, _tenant_entry(bucket))
    return value if isinstance(value, BucketTenant) else None


def bucket_tenant_to_learn(bucket: str) -> int | None:
    """The cache generation to learn the bucket's tenant under, or None when nothing is to be learned
    (known and fresh, or the cache is not in use here)."""
    value, generation = invalidation.lookup(invalidation.TOPIC_APIKEY, _tenant_entry(bucket))
    if isinstance(value, BucketTenant) and time.monotonic() - value.learned_at < TENANT_LEARNED_SECONDS:
        return None
    return generation


def bucket_tenant_learn(bucket: str, tenant: BucketTenant, generation: int) -> None:
    """Remember `tenant` for `bucket` (its key just authenticated), under the generation
    `bucket_tenant_to_learn` gave before the tenant's rows were read."""
    if not tenant.learned_at:
        tenant = BucketTenant(tenant.pk, tenant.slug, tenant.requests_per_minute, tenant.streams, time.monotonic())
    invalidation.store(invalidation.TOPIC_APIKEY, _tenant_entry(bucket), tenant, generation)


def _tenant_bucket(tenant: BucketTenant) -> str:
    # The slug too: a pk alone could name another tenant in a database made again (a test run).
    return f"t:{tenant.pk}:{tenant.slug}"


def tenant_limits(tenant: BucketTenant, limits: LimitSettings) -> LimitSettings:
    """The tenant's request budget as a window counter's settings (the key's window length)."""
    return LimitSettings(requests=tenant.requests(limits), window_seconds=limits.window_seconds, streams=0)


def tenant_request_admit(tenant: BucketTenant, limits: LimitSettings) -> int | None:
    """Count one request against the tenant's budget: None admitted, else the seconds to retry after."""
    return request_admit(_tenant_bucket(tenant), tenant_limits(tenant, limits))


async def tenant_request_admit_async(tenant: BucketTenant, limits: LimitSettings) -> int | None:
    return await request_admit_async(_tenant_bucket(tenant), tenant_limits(tenant, limits))


_buckets: dict[str, str | None] = {}


def caller_key(authorization: str | None) -> str | None:
    """The limit bucket of a request: an HMAC of its bearer token, or None without one. Kept per
    header value (a handful of callers hold most traffic; bounded, so a flood of forged tokens
    cannot grow it): the HMAC was a tenth of the limits' cost on every request."""
    if not authorization:
        return None
    bucket = _buckets.get(authorization, "")
    if bucket != "":
        return bucket
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    bucket = None if scheme.lower() != "bearer" or not token else salted_hmac(_KEY_SALT, token).hexdigest()[:32]
    if len(_buckets) >= 4096:
        _buckets.clear()
    _buckets[authorization] = bucket
    return bucket


_client: BaseCache | None = None


def _counters() -> BaseCache:
    """One cache client per process. `django.core.cache.cache` is per request context under ASGI:
    a fresh Redis client, and TCP connection, per limited request. Both backends are thread-safe;
    two threads racing here at start-up only build one spare client."""
    global _client
    if _client is None:
        _client = caches.create_connection(DEFAULT_CACHE_ALIAS)
    return _client


@receiver(setting_changed)
def _counters_reset(*, setting: str, **kwargs: object) -> None:
    global _client
    if setting == "CACHES":
        _client = None
    if setting == "SECRET_KEY":
        _buckets.clear()


def _window_cache_key(bucket: str, window: int) -> str:
    return f"openwop:rl:{bucket}:{window}"


def _streams_cache_key(bucket: str) -> str:
    # Not the counter's old `openwop:streams:` key: a release still running it during a rolling
    # upgrade INCRs a string there, which a sorted-set command would fail on (WRONGTYPE).
    return f"openwop:slots:{bucket}"


def _cache_usable() -> bool:
    return time.monotonic() >= _cache_retry_at


def _cache_down(exc: Exception) -> None:
    global _warned_at, _cache_retry_at
    now = time.monotonic()
    _cache_retry_at = now + CACHE_RETRY_SECONDS
    if now - _warned_at > 60:
        _warned_at = now
        logger.warning("rate limits not enforced: the cache is unreachable (%s)", type(exc).__name__)


def request_admit(bucket: str, limits: LimitSettings) -> int | None:
    """Count one request in the bucket's current window. None: admitted; an int: refused, retry
    after that many seconds (the rest of the window)."""
    if limits.requests <= 0 or not _cache_usable():
        return None
    now, window = _window_now(limits)
    key = _window_cache_key(bucket, window)
    try:
        _counters().add(key, 0, timeout=limits.window_seconds + 1)
        count = _counters().incr(key)
    except Exception as exc:  # fail open (module docstring)
        _cache_down(exc)
        return None
    return _retry_after(limits, count, now, window)


def _window_now(limits: LimitSettings) -> tuple[float, int]:
    now = time.time()
    return now, int(now // limits.window_seconds)


def _retry_after(limits: LimitSettings, count: int, now: float, window: int) -> int | None:
    """None while `count` is within the window's budget, else the seconds left in the window."""
    if count <= limits.requests:
        return None
    return max(1, math.ceil((window + 1) * limits.window_seconds - now))


# --- the same window counter from the event loop (apps/doors): no thread, one round trip ---

_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _redis_location() -> str | None:
    """The Redis URL of the counters' cache, or None when they live in process memory."""
    config = settings.CACHES.get(DEFAULT_CACHE_ALIAS, {})
    if not str(config.get("BACKEND", "")).endswith("RedisCache"):
        return None
    location = config.get("LOCATION")
    return location if isinstance(location, str) else None


def _async_redis() -> Any:
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        import redis.asyncio as aioredis

        options = settings.CACHES[DEFAULT_CACHE_ALIAS].get("OPTIONS", {})
        client = aioredis.Redis.from_url(
            str(_redis_location()),
            socket_connect_timeout=options.get("socket_connect_timeout"),
            socket_timeout=options.get("socket_timeout"),
        )
        _async_clients[loop] = client
    return client


def _resp_client() -> RespClient | None:
    """The loop's RESP client for the counters' Redis (apps/core/resp.py), when it can speak
    to it; the same two commands as the pipeline below at a fraction of its CPU."""
    options = settings.CACHES[DEFAULT_CACHE_ALIAS].get("OPTIONS", {})
    return resp_client(
        str(_redis_location()),
        connect_timeout=options.get("socket_connect_timeout"),
        timeout=options.get("socket_timeout"),
    )


async def request_admit_async(bucket: str, limits: LimitSettings) -> int | None:
    """`request_admit` for async callers. With Redis it is one pipelined round trip on the same key
    Django's cache client uses (`SET NX` + `INCR`, where the cache client takes three), so the
    doors and the REST wire spend one budget; with the in-process cache it is `request_admit`."""
    if limits.requests <= 0 or not _cache_usable():
        return None
    if _redis_location() is None:
        return request_admit(bucket, limits)
    now, window = _window_now(limits)
    key = _counters().make_key(_window_cache_key(bucket, window))
    try:
        client = _resp_client()
        if client is not None:
            count = await client.window_incr(key, limits.window_seconds + 1)
        else:
            pipe = _async_redis().pipeline(transaction=False)
            pipe.set(key, 0, ex=limits.window_seconds + 1, nx=True)
            pipe.incr(key)
            _, count = await pipe.execute()
    except Exception as exc:  # fail open (module docstring)
        _cache_down(exc)
        return None
    return _retry_after(limits, int(count), now, window)


# --- stream slots: one leased entry per open stream ---------------------------------------------
#
# A slot is an entry (a random id) in a sorted set per bucket, scored by the time its lease runs
# out. Taking one drops the set's expired entries, counts the rest and adds the new one, in one
# Lua script (atomic: two processes cannot both take the last slot); the stream renews its lease
# while it lasts (apps/core/stream_lease.py) and removes its entry when it ends. A process that
# dies (SIGKILL, OOM, a lost node) renews nothing, so its slots free themselves within a lease.
# Without Redis the same table lives in this process (a dict of entries with expiries).

_ACQUIRE = """
local now = tonumber(ARGV[1])
local expiry = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local limit = tonumber(ARGV[3 + i])
  if limit > 0 and redis.call('ZCARD', key) >= limit then
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, expiry, ARGV[3])
  redis.call('PEXPIREAT', key, math.ceil(expiry * 1000) + 1000)
end
return 0
"""

_RENEW = """
local expiry = tonumber(ARGV[1])
local held = 0
for _, key in ipairs(KEYS) do
  held = held + redis.call('ZADD', key, 'XX', 'CH', expiry, ARGV[2])
  redis.call('PEXPIREAT', key, math.ceil(expiry * 1000) + 1000)
end
return held
"""


def stream_slot_lease_seconds() -> float:
    """How long a stream slot holds without renewal (OPENWOP_STREAM_SLOT_LEASE_SECONDS, >= 1 s)."""
    return max(1.0, float(getattr(settings, "OPENWOP_STREAM_SLOT_LEASE_SECONDS", 30)))


@dataclass(frozen=True, slots=True)
class StreamSlot:
    """A slot taken: the set(s) its entry is in and the entry's id; `release` / `renew` take it."""

    keys: tuple[str, ...]  # the Redis sets it is in (keys already prefixed by the cache's make_key)
    slot_id: str
    local_keys: tuple[str, ...] = ()  # this process's sets it is in (all of them without Redis)


@dataclass(frozen=True, slots=True)
class SlotRefused:
    """No slot: the set at `budget` (e.g. "key_streams") already holds `limit` entries."""

    budget: str
    limit: int


@dataclass(frozen=True, slots=True)
class SlotBudget:
    """One set a stream's entry must fit in: its cache key, its ceiling (0 = none), its name."""

    key: str
    limit: int
    budget: str
    local: bool = False  # this process's own set, even with Redis (the host-wide cap per process)


HOST_STREAMS_KEY = "openwop:slots:host"


_local_slots: dict[str, dict[str, float]] = {}
_local_lock = threading.Lock()


def _slot_redis() -> Any:
    """The counters' own redis-py client (the cache's pool): the scripts need more than get/incr."""
    return _counters()._cache.get_client(write=True)  # type: ignore[attr-defined]


def stream_slot_acquire(
    bucket: str, limits: LimitSettings, *, tenant: BucketTenant | None = None, now: float | None = None
) -> StreamSlot | SlotRefused | None:
    """Take a stream slot (a leased entry, see above) in the key's set, its tenant's (when known)
    and this process's. A StreamSlot: taken (release it later, renew it meanwhile); SlotRefused:
    one of them is at its ceiling (which one: `budget`); None: nothing taken and nothing to release
    (no ceiling, or the cache is down: fail open)."""
    budgets = [SlotBudget(_streams_cache_key(bucket), limits.streams, "key_streams")]
    if tenant is not None:
        budgets.append(SlotBudget(_streams_cache_key(_tenant_bucket(tenant)), tenant.stream_ceiling(limits),
                                  "tenant_streams"))  # fmt: skip
    budgets.append(SlotBudget(HOST_STREAMS_KEY, limits.host_streams, "host_streams", local=True))
    return stream_slots_acquire(budgets, now=now)


def _local_take(budgets: list[SlotBudget], slot_id: str, now: float, expiry: float) -> SlotRefused | None:
    with _local_lock:
        for budget in budgets:
            entries = _local_slots.setdefault(budget.key, {})
            for held, until in list(entries.items()):
                if until <= now:
                    del entries[held]
            if len(entries) >= budget.limit:
                return SlotRefused(budget.budget, budget.limit)
        for budget in budgets:
            _local_slots[budget.key][slot_id] = expiry
    return None


def _local_drop(keys: tuple[str, ...], slot_id: str) -> None:
    with _local_lock:
        for key in keys:
            entries = _local_slots.get(key)
            if entries is not None:
                entries.pop(slot_id, None)
                if not entries:
                    del _local_slots[key]


def stream_slots_acquire(budgets: list[SlotBudget], *, now: float | None = None) -> StreamSlot | SlotRefused | None:
    """One entry in every set of `budgets` at once, or none (the first full set refuses). The
    process's own sets are taken first (and given back if a shared one refuses or fails)."""
    budgets = [b for b in budgets if b.limit > 0]
    if not budgets:
        return None
    now = time.time() if now is None else now
    expiry = now + stream_slot_lease_seconds()
    slot_id = uuid.uuid4().hex
    shared_here = _redis_location() is not None and _cache_usable()
    if _redis_location() is not None and not shared_here:
        budgets = [b for b in budgets if b.local]  # the cache is down: the shared sets fail open
    local = [b for b in budgets if b.local or not shared_here]
    shared = [b for b in budgets if not (b.local or not shared_here)]
    local_keys = tuple(b.key for b in local)
    if local and (refused := _local_take(local, slot_id, now, expiry)) is not None:
        return refused
    if not shared:
        return StreamSlot((), slot_id, local_keys) if local else None
    keys = tuple(_counters().make_key(b.key) for b in shared)
    try:
        full = int(_slot_redis().eval(_ACQUIRE, len(keys), *keys, now, expiry, slot_id, *(b.limit for b in shared)))
    except Exception as exc:  # fail open (module docstring)
        _cache_down(exc)
        return StreamSlot((), slot_id, local_keys) if local else None
    if full:
        _local_drop(local_keys, slot_id)
        refused_budget = shared[full - 1]
        return SlotRefused(refused_budget.budget, refused_budget.limit)
    return StreamSlot(keys, slot_id, local_keys)


def stream_slot_renew(slot: StreamSlot, *, now: float | None = None) -> bool:
    """Extend the slot's lease by a lease from now. False: it is no longer held (it expired and
    was dropped, or the cache failed); the stream goes on either way (fail open)."""
    now = time.time() if now is None else now
    expiry = now + stream_slot_lease_seconds()
    held = False
    with _local_lock:
        for key in slot.local_keys:
            entries = _local_slots.get(key, {})
            if slot.slot_id in entries:
                entries[slot.slot_id] = expiry
                held = True
    if not slot.keys:
        return held
    if not _cache_usable():
        return False
    try:
        return int(_slot_redis().eval(_RENEW, len(slot.keys), *slot.keys, expiry, slot.slot_id)) > 0
    except Exception as exc:
        _cache_down(exc)
        return False


def stream_slot_release(slot: StreamSlot) -> None:
    _local_drop(slot.local_keys, slot.slot_id)
    if not slot.keys:
        return
    try:
        pipe = _slot_redis().pipeline(transaction=False)
        for key in slot.keys:
            pipe.zrem(key, slot.slot_id)
        pipe.execute()
    except Exception as exc:  # the cache down: the entry's lease frees it
        _cache_down(exc)
