"""Per-API-key abuse limits kept in the cache: a fixed request window and a concurrent-stream count.

The cache is Redis when REDIS_URL is set (settings.CACHES), so every web process shares the
counters; otherwise Django's local-memory cache, per process. Counters are keyed by an HMAC of the
bearer token, never the token itself and without a database lookup, so a forged or unknown token
costs no query here and nobody can spend another key's budget without holding its secret.

Both limits fail open: with the cache unreachable (Redis down) requests are served unlimited for
CACHE_RETRY_SECONDS before the cache is tried again, and a warning is logged at most once a
minute. Availability of the wire outranks the abuse ceiling. These functions are synchronous (the
cache client is); the middleware calls them off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, BaseCache, caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.crypto import salted_hmac

from apps.core.resp import RespClient, resp_client

logger = logging.getLogger(__name__)

_KEY_SALT = "openwop-host.rate-limits"
# A stream slot that was never released (its process died) is forgotten after this long.
STREAM_SLOT_TTL_SECONDS = 3600
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

    @classmethod
    def current(cls) -> LimitSettings:
        return cls(
            requests=int(getattr(settings, "OPENWOP_RATE_LIMIT_REQUESTS", 0)),
            window_seconds=max(1, int(getattr(settings, "OPENWOP_RATE_LIMIT_WINDOW_SECONDS", 60))),
            streams=int(getattr(settings, "OPENWOP_MAX_STREAMS_PER_KEY", 0)),
        )


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
    return f"openwop:streams:{bucket}"


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


def stream_slot_acquire(bucket: str, limits: LimitSettings) -> bool | None:
    """Take a stream slot. True: taken (release it later); False: the key is at its ceiling;
    None: nothing to release (no ceiling, or the cache is down)."""
    if limits.streams <= 0 or not _cache_usable():
        return None
    key = _streams_cache_key(bucket)
    try:
        _counters().add(key, 0, timeout=STREAM_SLOT_TTL_SECONDS)
        count = _counters().incr(key)
        if count > limits.streams:
            _counters().decr(key)
            return False
        _counters().touch(key, STREAM_SLOT_TTL_SECONDS)
    except Exception as exc:
        _cache_down(exc)
        return None
    return True


def stream_slot_release(bucket: str) -> None:
    key = _streams_cache_key(bucket)
    try:
        if _counters().decr(key) < 0:
            _counters().set(key, 0, timeout=STREAM_SLOT_TTL_SECONDS)
    except Exception as exc:  # an expired key (ValueError) or the cache down: nothing held any more
        if not isinstance(exc, ValueError):
            _cache_down(exc)
