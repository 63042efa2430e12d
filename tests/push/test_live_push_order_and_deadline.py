"""Black box (issue 33, items 14 and 15): a real uvicorn and a real Celery worker (its sweeper on a
one-second clock) deliver to real HTTPS receivers on loopback.

- A receiver that fails once, then recovers: the task's pushes arrive in order (WORKING, its
  retry, then COMPLETED) and every one carries the config's credential; the credential is
  discarded only after the final push. Before, COMPLETED went out while WORKING waited for its
  retry, the credential was wiped, and the retry went out bare.
- A receiver that drips its headers a byte at a time: each attempt ends at its deadline, the
  delivery is dead after exactly `max_attempts`, and never two attempts are open at once. Before,
  the first attempt stayed open as long as the receiver dripped, its claim lapsed, and the sweeper
  started another beside it, past the attempt limit.
Counted, not timed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trustme
from a2a.types import SendMessageConfiguration, SendMessageRequest, Task, TaskPushNotificationConfig, TaskState

from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus, PushConfig
from tests.a2a.live import Session, live_card, user_message
from tests.core.drip_receivers import dripping_receiver
from tests.core.https_receivers import Behaviour, https_receiver
from tests.live import start_celery_worker, start_web, wait_until
from tests.push.conftest import live_push_env

TOKEN = "tok-live-order-3e9b-not-for-logs"


async def _send_with_push(base_url: str, key: str, url: str) -> Task:
    """SendMessage through the a2a-sdk JSON-RPC client, the push config inline."""
    session = Session(await live_card(base_url), "JSONRPC", key)
    try:
        request = SendMessageRequest(
            message=user_message(prefix="push-order", text="hi", skill="conformance-noop"),
            configuration=SendMessageConfiguration(
                task_push_notification_config=TaskPushNotificationConfig(url=url, token=TOKEN)
            ),
        )
        [event] = [e async for e in session.client().send_message(request)]
        return event.task
    finally:
        await session.close()


@pytest.mark.usefixtures("transactional_db")
def test_a_receiver_that_fails_once_gets_every_push_in_order_with_its_credential(
    live_env: Any, make_key: Callable[..., str], ca: trustme.CA, ca_bundle: str
) -> None:
    env, var_dir = live_env
    own_env = live_push_env(env, ca_bundle, queue="order", BACKOFF_BASE_SECONDS="1", SWEEP_SECONDS="1")
    web, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="push-order")
    try:
        with https_receiver(ca, "127.0.0.1", behaviour=Behaviour(fail_first=1)) as receiver:
            url = f"https://127.0.0.1:{receiver.port}/hook"
            task = asyncio.run(_send_with_push(base_url, make_key("acme"), url))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            rows = Delivery.unscoped_all_tenants.filter(run__run_id=task.id)

            def settled() -> bool:
                return rows.count() == 2 and not rows.filter(status=DeliveryStatus.PENDING).exists()

            wait_until(settled, f"both pushes settled\n{worker.log()[-3000:]}", timeout=60)
            states = [json.loads(seen.body)["statusUpdate"]["status"]["state"] for seen in receiver.received]
            assert states == ["TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
            assert [seen.headers.get("Authorization") for seen in receiver.received] == [f"Bearer {TOKEN}"] * 3
        stored = PushConfig.unscoped_all_tenants.get(run__run_id=task.id)
        assert stored.credentials_sealed is None and stored.credentials_wiped_at is not None
    finally:
        worker.stop()
        web.stop()


@pytest.mark.usefixtures("transactional_db")
def test_a_dripping_receiver_gets_max_attempts_one_at_a_time(
    live_env: Any, make_key: Callable[..., str], ca: trustme.CA, ca_bundle: str
) -> None:
    env, var_dir = live_env
    own_env = live_push_env(
        env,
        ca_bundle,
        queue="drip",
        ATTEMPT_TIMEOUT="1",
        MAX_ATTEMPTS="2",
        BACKOFF_BASE_SECONDS="1",
        SWEEP_SECONDS="1",
        SWEEP_GRACE_SECONDS="1",  # a lapsed claim would be re-sent at once
    )
    web, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="push-drip")
    try:
        # Drips far longer than this test waits: only the attempt's deadline can end an attempt.
        with dripping_receiver(ca, "127.0.0.1", phase="headers", drip_for=120.0) as drip:
            headers = {"Authorization": f"Bearer {make_key('acme')}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
                registered = client.post(
                    "/webhooks", json={"url": f"https://127.0.0.1:{drip.port}/hook", "events": ["run.completed"]}
                )
                assert registered.status_code == 201, registered.text
                created = client.post("/runs", json={"workflowId": "conformance-noop"})
                assert created.status_code == 201, created.text

            def dead() -> bool:
                return Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.DEAD).exists()

            wait_until(dead, f"the delivery dead-lettered\n{worker.log()[-3000:]}", timeout=45)
            wait_until(lambda: drip.stats.hung_up == 2, "both attempts hung up", timeout=10)
            row = Delivery.unscoped_all_tenants.get()
            errors = list(DeliveryAttempt.unscoped_all_tenants.filter(delivery=row).values_list("error", flat=True))
            assert (row.attempts, errors) == (2, ["timeout", "timeout"])
            assert (drip.stats.connections, drip.stats.most_open) == (2, 1)
    finally:
        worker.stop(kill=True)
        web.stop()
