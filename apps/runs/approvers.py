"""Approver enforcement (interrupt.md §Approver enforcement; security-defaults.md: it binds with
the fields, not a discovery flag): an interrupt whose data names an `approversList` is resolved
only by a Subject on that list, on every door. An empty or absent list is an open gate."""

from __future__ import annotations

from typing import Any

from apps.core.errors import Forbidden
from apps.tenants.subject import Subject


class NotAnApprover(Forbidden):
    """The resolver is not on the interrupt's approversList: refused, and the interrupt stays open."""


def approvers_of(payload: dict[str, Any] | None) -> list[str]:
    data = (payload or {}).get("data") or {}
    listed = data.get("approversList") if isinstance(data, dict) else None
    return [a for a in listed if isinstance(a, str) and a.strip()] if isinstance(listed, list) else []


def approver_check(*, subject: Subject, payload: dict[str, Any] | None) -> None:
    """Refuse (NotAnApprover, 403 forbidden on REST) a Subject the interrupt's list does not name."""
    listed = approvers_of(payload)
    if listed and subject.subject_id not in listed:
        raise NotAnApprover("The caller is not an eligible approver of this interrupt.")
