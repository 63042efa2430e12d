"""The discovery records this app stands behind (capabilities.md §5)."""

from __future__ import annotations

from typing import Any

from apps.core.protocol import CONTRACT_VERSION
from apps.runs.reads import RUN_LIST_MAX_PAGE_SIZE


def stable_capability(**members: Any) -> dict[str, Any]:
    """The record of a stable, witnessable-gated capability, then its own `members`."""
    return {"status": "stable", "since": CONTRACT_VERSION, "witness": "witnessable-gated", **members}


def run_list_capability() -> dict[str, Any]:
    return stable_capability(maxPageSize=RUN_LIST_MAX_PAGE_SIZE, filters=["workflowId", "status"])


def idempotency_capability() -> dict[str, Any]:
    return stable_capability()
