"""Black box: 8 hung receivers do not hold back a healthy one (webhooks.md §Durability, invariant
webhook-delivery-isolation). A real uvicorn and one real Celery worker whose pool (4 threads) is
smaller than the number of hung receivers; every receiver is a real HTTPS server on loopback.

Counted, not timed: the healthy receiver gets all N deliveries while every hung receiver still
holds its lane (no hung attempt has come back: the attempt timeout is longer than the test), and
no hung destination ever sees more requests at once than the lane cap. Before lanes, the 4 pool
slots were held by hung attempts and the healthy receiver got one delivery in the attempt timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import trustme

from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus
from tests.core.https_receivers import Behaviour, https_receiver
from tests.live import start_celery_worker, start_web, wait_until
from tests.push.conftest import live_push_env

HUNG = 8
RUNS = 5
LANE_CAP = 1


@pytest.mark.usefixtures("transactional_db")
def test_a_healthy_receiver_gets_every_delivery_while_8_hung_receivers_hold_their_lanes(
    live_env: Any, make_key: Callable[..., str], ca: trustme.CA, ca_bundle: str
) -> None:
    env, var_dir = live_env
    own_env = live_push_env(
        env,
        ca_bundle,
        queue="isolation",
        ATTEMPT_TIMEOUT="28",  # longer than this test waits: a hung attempt never comes back while we count
        MAX_ATTEMPTS="1",
        LANE_CAP=str(LANE_CAP),
    )
    daphne, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="push-isolation")  # --concurrency 4 < HUNG
    with ExitStack() as stack:
        healthy = stack.enter_context(https_receiver(ca, "127.0.0.1"))
        hung = [
            stack.enter_context(https_receiver(ca, "127.0.0.1", behaviour=Behaviour(hang=True))) for _ in range(HUNG)
        ]
        try:
            headers = {"Authorization": f"Bearer {make_key('acme')}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
                for receiver in [healthy, *hung]:
                    response = client.post(
                        "/webhooks",
                        json={"url": f"https://127.0.0.1:{receiver.port}/hook", "events": ["run.completed"]},
                    )
                    assert response.status_code == 201, response.text
                for _ in range(RUNS):
                    created = client.post("/runs", json={"workflowId": "conformance-noop"})
                    assert created.status_code == 201, created.text

            healthy_lane = f"https://127.0.0.1:{healthy.port}"
            healthy_done = Delivery.unscoped_all_tenants.filter(lane=healthy_lane, status=DeliveryStatus.DELIVERED)
            most_in_flight = 0

            def healthy_has_all() -> bool:
                nonlocal most_in_flight
                most_in_flight = max([most_in_flight, *(len(r.received) for r in hung)])
                return healthy_done.count() == RUNS

            wait_until(healthy_has_all, f"the healthy receiver's {RUNS} deliveries\n{worker.log()[-3000:]}", timeout=20)

            assert len(healthy.received) == RUNS
            hung_rows = Delivery.unscoped_all_tenants.exclude(lane=healthy_lane)
            # Every hung receiver still holds its lane: none of their attempts has come back...
            assert not DeliveryAttempt.unscoped_all_tenants.filter(delivery__in=hung_rows).exists()
            # ...and once every hung message is consumed, each hung destination has exactly the
            # cap's worth of attempts started (still in flight) and the rest parked on its lane.
            hung_lanes = [f"https://127.0.0.1:{receiver.port}" for receiver in hung]
            wait_until(
                lambda: hung_rows.filter(parked=True).count() == HUNG * (RUNS - LANE_CAP),
                f"every hung delivery parked or in flight\n{worker.log()[-3000:]}",
                timeout=20,
            )
            most_in_flight = max([most_in_flight, *(len(r.received) for r in hung)])
            assert most_in_flight == LANE_CAP
            for lane in hung_lanes:
                rows = Delivery.unscoped_all_tenants.filter(lane=lane)
                assert rows.count() == RUNS
                assert rows.filter(in_flight_until__isnull=False).count() == LANE_CAP
                assert sum(rows.values_list("attempts", flat=True)) == LANE_CAP
            assert not DeliveryAttempt.unscoped_all_tenants.filter(delivery__in=hung_rows).exists()
        finally:
            worker.stop(kill=True)  # its sender threads are parked on hung sockets
            daphne.stop()
            for receiver in hung:
                receiver.server.release.set()
