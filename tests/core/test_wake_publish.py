"""`publish_wake` from a request's sync code hands the send to the server's loop and returns; the
wake still arrives. Runs on the configured layer (Redis with REDIS_URL, else in-memory)."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async

from apps.core import sse
from apps.core.sse import publish_wake, wake_group_name, wake_waiter


async def test_a_wake_published_from_a_request_thread_reaches_the_waiter() -> None:
    group = wake_group_name("test", "acme", "wake-from-thread")
    async with wake_waiter(group) as wait:
        handed_to = await sync_to_async(sse._server_loop)()
        assert handed_to is asyncio.get_running_loop()  # the fire-and-forget path is the one taken
        await sync_to_async(publish_wake)(group)
        waited = await wait(5.0)
    assert waited < 4.0  # woken, not timed out


def test_outside_a_server_thread_the_send_is_waited_for() -> None:
    assert sse._server_loop() is None
    publish_wake(wake_group_name("test", "acme", "no-listener"))  # returns, raises nothing


async def test_a_wake_skips_only_a_group_with_no_member() -> None:
    """`_send_wake` asks Redis whether the group has any member before `group_send` (one EXISTS on
    the loop's RESP client): a member makes it send; no member, nothing is sent."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    group = wake_group_name("test", "acme", "members-check")
    if not hasattr(layer, "_group_key"):
        assert await sse._group_empty(layer, group) is False  # the in-memory layer: always sent
        print("in-memory channel layer: the Redis group check is exercised when REDIS_URL is set")
        return
    assert await sse._group_empty(layer, group) is True
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        assert await sse._group_empty(layer, group) is False
        await sse._send_wake(layer, group)
        received = await asyncio.wait_for(layer.receive(channel), 5.0)
        assert received["type"] == "log.wake"
    finally:
        await layer.group_discard(group, channel)
    assert await sse._group_empty(layer, group) is True
