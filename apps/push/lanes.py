"""Per-destination lanes: why one slow or hung receiver cannot delay another (webhooks.md
§Durability, invariant webhook-delivery-isolation).

Two limits, and the Celery pool is neither of them:

- A lane is one destination origin (`https://host:port`). At most OPENWOP_PUSH_LANE_CAP attempts
  to one lane are in flight at once, across every worker: the claim counts the lane's live claims
  under the lane row's lock (PushLane), so it holds across every worker and broker. A delivery
  whose lane is full is *parked*: its message is consumed, the row stays pending and due, and the
  attempt that frees a slot on the lane wakes the oldest parked row (`lane_wake`). The sweeper is
  the backstop for a wake that never came (a worker killed while holding the lane).
- The send runs on this process's sender threads (`Senders`), not on the Celery worker slot: the
  `push.deliver` task claims and returns in milliseconds, so a hung receiver holds one sender
  thread and one lane slot, never a pool slot. OPENWOP_PUSH_SENDERS bounds the threads; when all
  are busy the message is sent again shortly instead of waiting in the slot.

So a hung origin costs at most LANE_CAP senders, and a healthy origin is only delayed once
(hung origins x LANE_CAP) reaches SENDERS in a process — independent of the Celery pool size.
At-least-once is unchanged: the claim (`in_flight_until`) is in the row before anything is sent,
and a worker killed mid-send leaves a claim that expires and a row the sweeper re-sends.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from django.db import connection
from django.utils import timezone

from apps.push.capabilities import push_setting
from apps.push.models import Delivery, DeliveryStatus, PushLane

logger = logging.getLogger(__name__)


def lane_of(url: str) -> str:
    """The lane of a destination URL: its scheme, host and port, nothing that could be a secret."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme.lower()}://{host}:{port}"


def lane_cap() -> int:
    return max(1, int(push_setting("OPENWOP_PUSH_LANE_CAP")))


def lane_lock(origin: str) -> None:
    """Take the lane's lock for the rest of the caller's transaction (the row's lock, taken by an
    UPDATE), so two claims cannot both count the lane before either writes."""
    now = timezone.now()
    if not PushLane.objects.filter(origin=origin).update(touched_at=now):
        PushLane.objects.bulk_create([PushLane(origin=origin, touched_at=now)], ignore_conflicts=True)
        PushLane.objects.filter(origin=origin).update(touched_at=now)


def lane_in_flight(origin: str) -> int:
    """Live claims on the lane (an expired claim is a dead attempt and holds nothing)."""
    return Delivery.unscoped_all_tenants.filter(
        lane=origin, status=DeliveryStatus.PENDING, in_flight_until__gt=timezone.now()
    ).count()


def lane_wake(origin: str, enqueue: Callable[..., None]) -> int:
    """Hand the lane's free slots to its oldest parked rows (one message each). Lock-free: waking
    too many is harmless (a woken row finding the lane full parks again); waking too few cannot
    happen, since a claim parks under the lane lock that the freeing attempt also took."""
    free = lane_cap() - lane_in_flight(origin)
    if free <= 0:
        return 0
    woken = 0
    parked = (
        Delivery.unscoped_all_tenants.filter(lane=origin, status=DeliveryStatus.PENDING, parked=True)
        .order_by("next_attempt_at", "id")
        .values_list("pk", "queue")[:free]
    )
    for pk, queue in parked:
        if Delivery.unscoped_all_tenants.filter(pk=pk, parked=True).update(parked=False):
            enqueue(delivery_pk=pk, queue=queue, countdown=0.0)
            woken += 1
    return woken


class Senders:
    """This process's sender threads. `reserve()` before claiming, so a claim is never made that
    no thread can send; the reserved slot is given back when the send ends (or was not needed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0

    @staticmethod
    def limit() -> int:
        return max(1, int(push_setting("OPENWOP_PUSH_SENDERS")))

    def reserve(self) -> bool:
        with self._lock:
            if self._busy >= self.limit():
                return False
            self._busy += 1
            if self._pool is None or self._size < self.limit():
                # A raised limit gets a bigger pool; sends already on the old one finish there.
                self._size = self.limit()
                self._pool = ThreadPoolExecutor(max_workers=self._size, thread_name_prefix="push-sender")
            return True

    def release(self) -> None:
        with self._lock:
            self._busy -= 1

    def start(self, send: Callable[[], None]) -> None:
        """Run `send` on a sender thread, in a copy of the caller's context (its log scope: the
        delivery's lines name it there too); the reservation is released when it ends."""
        assert self._pool is not None, "reserve() first"
        try:
            self._pool.submit(contextvars.copy_context().run, self._run, send)
        except RuntimeError:
            # The interpreter is shutting down: the claim expires and the sweeper re-sends.
            self.release()
            raise

    def _run(self, send: Callable[[], None]) -> None:
        try:
            send()
        except Exception:
            # The claim stays on the row and expires; the sweeper re-sends (at-least-once).
            logger.exception("push send failed; the sweeper will retry the delivery")
        finally:
            connection.close()  # this thread's DB connection: sender threads outlive their sends
            self.release()


senders = Senders()
