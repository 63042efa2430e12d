"""Black box: a real uvicorn and real Celery workers on a queue of their own deliver a webhook over
HTTPS; the worker is SIGKILLed between attempts and the delivery still arrives (webhooks.md
§Durability: at-least-once; the retry policy lives on the row, the sweeper re-sends a lost message).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trustme

from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus
from tests.core.https_receivers import Behaviour, https_receiver
from tests.live import start_celery_worker, start_web, wait_until
from tests.push.conftest import live_push_env


@pytest.mark.usefixtures("transactional_db")
def test_a_webhook_delivery_survives_its_worker_being_killed(
    live_env: Any, make_key: Callable[..., str], ca: trustme.CA, ca_bundle: str
) -> None:
    env, var_dir = live_env
    own_env = live_push_env(
        env,
        ca_bundle,
        queue="worker-kill",
        BACKOFF_BASE_SECONDS="30",  # the retry is far off: only the sweeper can bring it in
        ATTEMPT_TIMEOUT="3",
        SWEEP_SECONDS="1",
        SWEEP_GRACE_SECONDS="1",
    )
    daphne, base_url = start_web(own_env, var_dir)
    first = start_celery_worker(own_env, var_dir, name="push-doomed")
    replacement = None
    try:
        with https_receiver(ca, "127.0.0.1", behaviour=Behaviour(status=500)) as receiver:
            headers = {"Authorization": f"Bearer {make_key('acme')}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
                response = client.post(
                    "/webhooks",
                    json={"url": f"https://127.0.0.1:{receiver.port}/hook", "events": ["run.completed"]},
                )
                assert response.status_code == 201, response.text
                created = client.post("/runs", json={"workflowId": "conformance-noop"})
                assert created.status_code == 201, created.text

            def first_attempt_recorded() -> bool:
                return DeliveryAttempt.unscoped_all_tenants.exists()

            wait_until(first_attempt_recorded, f"the first attempt\n{first.log()[-3000:]}")
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(timeout=15)
            row = Delivery.unscoped_all_tenants.get()
            assert row.status == DeliveryStatus.PENDING and row.last_status_code == 500, (
                row.last_error,
                first.log()[-3000:],
            )

            # The retry's due time is moved up as an operator's clock would reach it; the message
            # that carried it died with the worker, so only the sweeper can send it now.
            Delivery.unscoped_all_tenants.filter(pk=row.pk).update(next_attempt_at=row.created_at)
            receiver.behaviour.status = 200
            replacement = start_celery_worker(own_env, var_dir, name="push-replacement")
            wait_until(
                lambda: Delivery.unscoped_all_tenants.get(pk=row.pk).status == DeliveryStatus.DELIVERED,
                f"the replacement worker to deliver\n{replacement.log()[-3000:]}",
            )
            assert len(receiver.received) >= 2
            assert all(r.headers["OpenWOP-Event-Type"] == "run.completed" for r in receiver.received)
    finally:
        for process in (first, replacement, daphne):
            if process is not None:
                process.stop()
