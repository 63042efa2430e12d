"""The `webhooks` discovery record (webhooks.md §Surfaces; facets/webhooks.schema.json)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apps.runs.capabilities import stable_capability

DEAD_LETTER_RETENTION_DAYS = 14
DEAD_LETTER_MAX_PAGE_SIZE = 100


def push_setting(name: str) -> float:
    """An OPENWOP_PUSH_* knob, read from Django settings only (openwop_host/settings.py reads the
    environment once, through its one `env`)."""
    return float(getattr(settings, name))


def push_max_attempts() -> int:
    return int(push_setting("OPENWOP_PUSH_MAX_ATTEMPTS"))


def webhooks_capability() -> dict[str, Any]:
    return stable_capability(
        signatureAlgorithms=["v1"],
        retryPolicy={"maxAttempts": push_max_attempts(), "backoff": "exponential"},
        deadLetter={"retentionDays": DEAD_LETTER_RETENTION_DAYS, "maxPageSize": DEAD_LETTER_MAX_PAGE_SIZE},
    )
