"""The doors' RESP client (apps/core/resp.py) against the real Redis: the rate window's two
commands, the group check of a wake-up, error replies, a server that never answers, a refused
connection, and the URLs it leaves to redis-py."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid

import pytest
import redis

from apps.core.resp import RedisReplyError, RespClient, resp_client

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="REDIS_URL is unset: no Redis to speak to (CI sets it)")


def _key() -> str:
    return f"openwop-test:lean:{uuid.uuid4().hex}"


@needs_redis
async def test_window_incr_counts_and_sets_the_windows_expiry() -> None:
    client = resp_client(REDIS_URL, timeout=2.0)
    assert client is not None
    key = _key()
    counts = await asyncio.gather(*(client.window_incr(key, 61) for _ in range(25)))
    assert sorted(counts) == list(range(1, 26))  # every caller its own count, none lost or shared
    sync = redis.Redis.from_url(REDIS_URL)
    assert int(sync.get(key) or 0) == 25
    assert 0 < sync.ttl(key) <= 61
    sync.delete(key)


@needs_redis
async def test_the_urls_database_is_the_one_counted_in() -> None:
    base, _, _ = REDIS_URL.rpartition("/") if REDIS_URL.rsplit("/", 1)[-1].isdigit() else (REDIS_URL, "", "")
    other = f"{base.rstrip('/')}/11"
    client = resp_client(other, timeout=2.0)
    assert client is not None
    key = _key()
    assert await client.window_incr(key, 30) == 1
    assert redis.Redis.from_url(other).get(key) == b"1"
    assert redis.Redis.from_url(f"{base.rstrip('/')}/12").get(key) is None
    redis.Redis.from_url(other).delete(key)


@needs_redis
async def test_exists_and_an_error_reply_leave_the_connection_usable() -> None:
    client = resp_client(REDIS_URL, timeout=2.0)
    assert client is not None
    key = _key()
    assert await client.exists(key.encode()) is False
    redis.Redis.from_url(REDIS_URL).set(key, "not a number", ex=30)
    assert await client.exists(key.encode()) is True
    with pytest.raises(RedisReplyError):
        await client.window_incr(key, 30)  # INCR of a string: -ERR, raised to the caller
    other = _key()
    assert await client.window_incr(other, 30) == 1  # the replies still line up with their callers
    redis.Redis.from_url(REDIS_URL).delete(key, other)


async def test_a_server_that_never_answers_times_out_and_the_next_call_reconnects() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        client = RespClient("127.0.0.1", port, None, None, 0, 1.0, 0.2)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                await client.window_incr(_key(), 30)
    finally:
        listener.close()


async def test_a_refused_connection_is_a_connection_error() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    client = RespClient("127.0.0.1", port, None, None, 0, 1.0, 1.0)
    with pytest.raises(ConnectionError):
        await client.exists(b"anything")


async def test_urls_it_does_not_speak_are_left_to_redis_py() -> None:
    for url in ("rediss://127.0.0.1:6379/0", "unix:///tmp/redis.sock", "redis://127.0.0.1:6379/0?protocol=3"):
        assert resp_client(url) is None, url
    assert resp_client("redis://:s%40cret@127.0.0.1:6380/3") is not None
