"""How many messages wait in each Celery queue the host declares, read when /metrics is scraped
(issue 51 item 3): a backlog that grows says the workers are too few (or stopped), before runs
and pushes are late.

Read from the broker itself, cheaply and never in the way of the scrape: Redis answers LLEN of each
queue's list (with kombu's priority lists beside it) in one pipelined round trip on a connection
that gives up after QUEUE_READ_TIMEOUT_SECONDS; the filesystem transport (the zero-setup default)
counts its folder's message files by queue. A broker that does not answer leaves the gauge without
samples (and says so in the log once), never fails the scrape. Messages a worker has taken but
not finished (its prefetch, a countdown's wait) are not in the queue any more, so not counted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

QUEUE_READ_TIMEOUT_SECONDS = 0.25
# kombu's Redis transport keeps a queue's messages of priority p > 0 in `<queue>\x06\x16<p>`
# (its default priority steps: 0, 3, 6, 9); priority 0, the host's only one, in `<queue>` itself.
_PRIORITY_SEPARATOR = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)

_failing = False


def declared_queues() -> list[str]:
    """The queue names settings declare (CELERY_TASK_QUEUES: the runs' and the pushes')."""
    queues = getattr(settings, "CELERY_TASK_QUEUES", None) or ()
    names = [str(queue.name) for queue in queues] or [str(settings.CELERY_TASK_DEFAULT_QUEUE)]
    return sorted(set(names))


def queue_lengths(queues: list[str]) -> dict[str, int] | None:
    """Messages waiting per queue, or None when the broker cannot say (eager mode, memory://, an
    unknown transport, or no answer in time)."""
    url = str(settings.CELERY_BROKER_URL)
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        return None
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    if url.startswith(("redis://", "rediss://", "unix://")):
        return _redis_lengths(url, queues, str(options.get("global_keyprefix", "")))
    if url.startswith("filesystem://"):
        return _folder_lengths(str(options.get("data_folder_in", "")), queues)
    return None


def _redis_lengths(url: str, queues: list[str], prefix: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(
        url, socket_connect_timeout=QUEUE_READ_TIMEOUT_SECONDS, socket_timeout=QUEUE_READ_TIMEOUT_SECONDS
    )
    try:
        pipeline = client.pipeline(transaction=False)
        for queue in queues:
            pipeline.llen(prefix + queue)
            for step in _PRIORITY_STEPS:
                pipeline.llen(f"{prefix}{queue}{_PRIORITY_SEPARATOR}{step}")
        replies = pipeline.execute()
    finally:
        client.close()
    per_queue = 1 + len(_PRIORITY_STEPS)
    return {queue: sum(int(n) for n in replies[i * per_queue : (i + 1) * per_queue]) for i, queue in enumerate(queues)}


def _folder_lengths(folder: str, queues: list[str]) -> dict[str, int]:
    # kombu's filesystem transport names a message `<ms>_<uuid>.<queue>.msg`.
    counts = dict.fromkeys(queues, 0)
    suffixes = {f".{queue}.msg": queue for queue in queues}
    with os.scandir(folder) as entries:
        for entry in entries:
            for suffix, queue in suffixes.items():
                if entry.name.endswith(suffix):
                    counts[queue] += 1
    return counts


def queue_gauges() -> Iterator[GaugeMetricFamily]:
    global _failing
    family = GaugeMetricFamily(
        "openwop_celery_queue_length",
        "Messages waiting in each Celery queue the host declares (runs, pushes), read from the broker when"
        " scraped; no sample when the broker does not answer.",
        labels=["queue"],
    )
    queues = declared_queues()
    try:
        lengths = queue_lengths(queues)
    except Exception as exc:  # redis-py's and the OS's errors alike: fail open
        if not _failing:
            # The class name only: a broker error's text may carry its URL, and so its password.
            logger.warning("metrics: the broker's queue lengths are unreadable (%s)", type(exc).__name__)
        _failing, lengths = True, None
    else:
        _failing = False
    for queue, length in sorted((lengths or {}).items()):
        family.add_metric([queue], length)
    yield family
