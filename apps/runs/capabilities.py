"""The discovery records this app stands behind (capabilities.md §5)."""

from __future__ import annotations

from typing import Any

from apps.core.protocol import CONTRACT_VERSION
from apps.runs.reads import RUN_LIST_MAX_PAGE_SIZE


def run_list_capability() -> dict[str, Any]:
    return {
        "status": "stable",
        "since": CONTRACT_VERSION,
        "witness": "witnessable-gated",
        "maxPageSize": RUN_LIST_MAX_PAGE_SIZE,
        "filters": ["workflowId", "status"],
    }


def idempotency_capability() -> dict[str, Any]:
    return {"status": "stable", "since": CONTRACT_VERSION, "witness": "witnessable-gated"}
