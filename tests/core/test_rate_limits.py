"""The limit counters fail open, and stop trying an unreachable cache for a while
(apps/core/rate_limits.py). The cache here is a Redis nobody listens on."""

from __future__ import annotations

import time

import pytest
from django.core.cache import caches

from apps.core import rate_limits
from apps.core.rate_limits import LimitSettings, caller_key, request_admit, stream_slot_acquire
from tests.live import free_port


@pytest.fixture
def dead_cache(settings, monkeypatch):  # type: ignore[no-untyped-def]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    dead = caches.create_connection("default")
    calls: list[str] = []
    real_add = dead.add

    def counted_add(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("add")
        return real_add(*args, **kwargs)

    monkeypatch.setattr(dead, "add", counted_add)
    monkeypatch.setattr(rate_limits, "_counters", lambda: dead)
    monkeypatch.setattr(rate_limits, "_cache_retry_at", 0.0)
    return calls


def test_an_unreachable_cache_fails_open_then_is_left_alone(dead_cache) -> None:  # type: ignore[no-untyped-def]
    limits = LimitSettings(requests=1, window_seconds=60, streams=1)
    bucket = caller_key("Bearer owk_a.b")
    assert bucket is not None
    assert request_admit(bucket, limits) is None  # admitted although nothing could be counted
    assert dead_cache == ["add"]
    for _ in range(50):
        assert request_admit(bucket, limits) is None
        assert stream_slot_acquire(bucket, limits) is None  # nothing taken, nothing to release
    assert dead_cache == ["add"]  # no attempt per request while it is down
    rate_limits._cache_retry_at = time.monotonic() - 1  # the retry interval has passed
    assert request_admit(bucket, limits) is None and dead_cache == ["add", "add"]


def test_caller_key_hides_the_token_and_ignores_other_schemes() -> None:
    bucket = caller_key("Bearer owk_prefix.secret-part")
    assert bucket and "secret" not in bucket and "owk" not in bucket
    assert caller_key("bearer  owk_prefix.secret-part ") == bucket
    assert caller_key("Basic abc") is None and caller_key(None) is None and caller_key("Bearer ") is None


def test_every_request_context_shares_one_counter_client() -> None:
    """Under ASGI each request has its own `caches["default"]` (a fresh Redis client, so a fresh
    connection per request); the limits keep one client per process."""
    import asyncio
    import contextvars

    async def one_request() -> tuple[object, object]:
        return caches["default"], rate_limits._counters()

    first = asyncio.run(one_request())
    second = contextvars.Context().run(asyncio.run, one_request())
    assert first[1] is second[1]
    assert first[0] is not second[0]  # what the limits no longer use


@pytest.fixture(params=["redis", "local"])
def slot_cache(request, settings):  # type: ignore[no-untyped-def]
    """The stream slots on this run's Redis (REDIS_URL) and in process memory (no Redis)."""
    import os

    if request.param == "redis":
        url = os.environ.get("REDIS_URL")
        if not url:
            pytest.skip("REDIS_URL is not set: the Redis half of the lease test needs a Redis")
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    else:
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.OPENWOP_STREAM_SLOT_LEASE_SECONDS = 30
    rate_limits._cache_retry_at = 0.0
    return request.param


def test_an_unrenewed_slot_expires_and_a_renewed_one_holds(slot_cache) -> None:  # type: ignore[no-untyped-def]
    """A slot is a lease (issue 49 item 5): a process that stopped renewing (it died) frees its
    slot once the lease ran out; a stream that renews keeps it. Times are passed in, not slept."""
    import uuid

    limits = LimitSettings(requests=0, window_seconds=60, streams=1)
    now = time.time()
    dead, alive = f"dead-{uuid.uuid4().hex}", f"alive-{uuid.uuid4().hex}"

    slot = stream_slot_acquire(dead, limits, now=now)
    assert isinstance(slot, rate_limits.StreamSlot)
    assert stream_slot_acquire(dead, limits, now=now + 29) == rate_limits.SlotRefused("key_streams", 1)
    # Never renewed: past its lease the slot is free for another stream of the key.
    again = stream_slot_acquire(dead, limits, now=now + 31)
    assert isinstance(again, rate_limits.StreamSlot)
    assert rate_limits.stream_slot_renew(slot, now=now + 31) is False  # the lapsed one is gone

    held = stream_slot_acquire(alive, limits, now=now)
    assert isinstance(held, rate_limits.StreamSlot)
    for step in (20, 40, 60):  # renewed within each lease
        assert rate_limits.stream_slot_renew(held, now=now + step) is True
    assert stream_slot_acquire(alive, limits, now=now + 75) == rate_limits.SlotRefused("key_streams", 1)
    rate_limits.stream_slot_release(held)
    assert isinstance(stream_slot_acquire(alive, limits, now=now + 75), rate_limits.StreamSlot)
    rate_limits.stream_slot_release(again)


def test_tenant_and_host_stream_ceilings(slot_cache) -> None:  # type: ignore[no-untyped-def]
    """A stream takes an entry in its key's, its tenant's and this process's sets at once; the first
    full one refuses and names its budget, and a refused stream holds nothing anywhere."""
    import uuid

    slug = f"t-{uuid.uuid4().hex}"
    tenant = rate_limits.BucketTenant(pk=1, slug=slug, streams=2)
    limits = LimitSettings(requests=0, window_seconds=60, streams=5, tenant_streams=100, host_streams=3)
    keys = [f"k-{uuid.uuid4().hex}" for _ in range(3)]
    rate_limits._local_slots.pop(rate_limits.HOST_STREAMS_KEY, None)
    first = stream_slot_acquire(keys[0], limits, tenant=tenant)
    second = stream_slot_acquire(keys[1], limits, tenant=tenant)
    assert isinstance(first, rate_limits.StreamSlot) and isinstance(second, rate_limits.StreamSlot)
    # The tenant's row says 2 (over the host default of 100): a third key of it is refused.
    assert stream_slot_acquire(keys[2], limits, tenant=tenant) == rate_limits.SlotRefused("tenant_streams", 2)
    other = rate_limits.BucketTenant(pk=2, slug=f"{slug}-other")
    third = stream_slot_acquire(keys[2], limits, tenant=other)
    assert isinstance(third, rate_limits.StreamSlot)
    # This process serves 3 streams: the host-wide cap refuses the next, whoever asks.
    assert stream_slot_acquire(f"k-{uuid.uuid4().hex}", limits, tenant=other) == rate_limits.SlotRefused(
        "host_streams", 3
    )
    rate_limits.stream_slot_release(first)
    again = stream_slot_acquire(keys[2], limits, tenant=tenant)
    assert isinstance(again, rate_limits.StreamSlot)
    for slot in (second, third, again):
        rate_limits.stream_slot_release(slot)
    assert not rate_limits._local_slots.get(rate_limits.HOST_STREAMS_KEY)
