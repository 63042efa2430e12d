"""The `webhooks` discovery record (webhooks.md §Surfaces; facets/webhooks.schema.json)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

from apps.core.protocol import CONTRACT_VERSION

DEAD_LETTER_RETENTION_DAYS = 14
DEAD_LETTER_MAX_PAGE_SIZE = 100


def push_setting(name: str, default: float) -> float:
    """An OPENWOP_PUSH_* knob: Django settings first, then the process environment, then the default.
    (The environment arm lets a deployment or a live test tune a worker without a settings edit.)"""
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name) or None
    return float(value) if value is not None else default


def push_max_attempts() -> int:
    return int(push_setting("OPENWOP_PUSH_MAX_ATTEMPTS", 5))


def webhooks_capability() -> dict[str, Any]:
    return {
        "status": "stable",
        "since": CONTRACT_VERSION,
        "witness": "witnessable-gated",
        "signatureAlgorithms": ["v1"],
        "retryPolicy": {"maxAttempts": push_max_attempts(), "backoff": "exponential"},
        "deadLetter": {"retentionDays": DEAD_LETTER_RETENTION_DAYS, "maxPageSize": DEAD_LETTER_MAX_PAGE_SIZE},
    }
